// How a worker joins a running job, from what every server answered to its
// registration (pure; tests/job_alignment_test):
//  - sync and ssp: when a server restored a checkpoint and awaits a rewind,
//    every server must go back to the newest step that all of them hold a
//    checkpoint of. The worker that sees it sends the rewind; servers apply
//    one rewind per restart, so two workers that both see it do no harm.
//  - answers from servers on different timelines mix states from before and
//    after a rewind (another worker's, under way): register again.
//  - otherwise the worker continues at the largest step any server gives,
//    and tells the servers that gave a smaller one (async: its own clock on a
//    server that restored an older checkpoint), naming the timeline so that
//    a server that rewound meanwhile refuses.
//  - a server with no weights while others have trained is a lost shard
//    (restarted without a --checkpoint_dir), or an answer taken before the
//    job's init reached it: register again, and fail with the plan's error
//    if it stays so.
#ifndef SHARDPS_CLIENT_JOB_ALIGNMENT_H_
#define SHARDPS_CLIENT_JOB_ALIGNMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_view.h"

namespace shardps {

// One server's answer to a registration.
struct ServerJoinView {
  int server_id = 0;
  int64_t current_step = 0;
  uint64_t incarnation = 0;
  int64_t timeline = 0;
  bool awaiting_rewind = false;
  bool initialized = false;
  bool trained = false;  // some key has had an optimizer step.
  std::vector<int64_t> checkpoint_steps;  // ascending.
};

struct JoinPlan {
  enum class Action { kContinue, kRewind, kRegisterAgain, kFail };
  Action action = Action::kContinue;
  // kContinue: the step to continue at; kRewind: the step to rewind to.
  int64_t step = 0;
  // kContinue: the servers' timeline; kRewind: the one the job enters.
  int64_t timeline = 0;
  // kContinue: servers to register with again at `step`.
  std::vector<int> behind;
  // kRewind: the restarted servers, as {server id, incarnation}.
  std::vector<std::pair<int, uint64_t>> restarted;
  absl::Status error;  // kFail; kRegisterAgain: the error if looking again does not help
};

// REQUIRES: one view per server.
JoinPlan PlanJoin(Mode mode, const std::vector<ServerJoinView>& servers);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_JOB_ALIGNMENT_H_
