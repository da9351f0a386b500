// Everything a ParameterServer is configured with. Filled from flags in
// server/ps_server_main.cc and nowhere else.
#ifndef SHARDPS_SERVER_SERVER_OPTIONS_H_
#define SHARDPS_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_view.h"
#include "common/trace.h"
#include "server/async_lr_scaling.h"
#include "server/replica_link.h"
#include "server/optimizer.h"

namespace shardps {

// async and ssp: a push's learning rate against its staleness.
enum class StalenessLr {
  kNone,
  // lr / (1 + staleness), as in staleness-aware ASGD, in place of
  // --async_lr_scaling's lr / N (the two agree when N workers push in turn).
  kInverse,
  // lr / N times min(1, N / (1 + staleness)): a push staler than the N - 1
  // updates one round of the other workers brings is damped as kInverse
  // would; a fresher one keeps lr / N.
  kCapped,
};

// async and ssp, SGD with momentum: how many updates ahead the served
// weights lead the momentum's point (server/optimizer.h, "Momentum
// lookahead"). kAutoLookahead: the mode's default, LookaheadUpdates().
inline constexpr double kAutoLookahead = -1;
// The default lookahead per other worker: each of the N - 1 others pushes
// about once between a worker's pull and its push; leading by twice that
// was measured best (mlp, N = 8: 1x, 1.5x and 2x reached 0.8832, 0.8836 and
// 0.8843; docs/consistency.md).
inline constexpr double kLookaheadPerOtherWorker = 2.0;

absl::StatusOr<AsyncLrScaling> ParseAsyncLrScaling(const std::string& text);  // "workers", "none"
absl::StatusOr<StalenessLr> ParseStalenessLr(const std::string& text);  // "none", "inverse", "capped"
std::string StalenessLrName(StalenessLr rule);
// "auto" (kAutoLookahead), "none" (0) or a number of updates >= 0.
absl::StatusOr<double> ParseMomentumLookahead(const std::string& text);

// The longest a request waits on a server (a pull for its step, an answer
// for its copy), whatever deadline it came with, none included: a call
// whose caller has gone, or a peer's pull of a step never reached, is
// answered DEADLINE_EXCEEDED by then instead of held until shutdown.
inline constexpr absl::Duration kLongestWait = absl::Hours(1);

struct ServerOptions {
  int server_id = 0;
  JobView job;  // mode, staleness, counts, partition bytes; layout_hash unused.
  OptimizerOptions optimizer;

  AsyncLrScaling async_lr_scaling = AsyncLrScaling::kAuto;
  StalenessLr staleness_lr = StalenessLr::kCapped;
  double momentum_lookahead = kAutoLookahead;  // updates, or kAutoLookahead
  int64_t staleness_log_every = 1000;  // steps between staleness log lines (async, ssp); 0: none

  absl::Duration worker_timeout = absl::Seconds(30);
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // A gap this long between housekeeping ticks means the server itself did
  // not run (stopped or starved); it is not counted as workers' silence.
  absl::Duration pause_threshold = absl::Seconds(1);

  int64_t row_ttl_steps = 0;  // sparse tables: rows untouched this many steps are dropped; 0: never.
  int row_admit_count = 0;    // sparse tables: a row is stored at its id's Kth push; 0, 1: at first touch.
  int64_t max_message_bytes = 256 << 20;  // --max_message_bytes: bounds a row pull's answer before it is read.

  std::string checkpoint_dir;          // empty: no checkpoints.
  int64_t checkpoint_every_steps = 0;  // 0: not by steps.
  absl::Duration checkpoint_every_interval = absl::ZeroDuration();  // zero: not by time.
  int checkpoints_to_keep = 2;         // the newest this many stay on disk.
  bool checkpoint_on_shutdown = true;  // with a checkpoint_dir.

  // Records every key's apply; null: not traced. Borrowed: must outlive the
  // server.
  Trace* trace = nullptr;
  // With job.replicas > 1: carries this server's updates to the next copy
  // (server/replica_link.h); must outlive the server. Null: updates stay
  // here, and pulls do not wait for a copy's acknowledgement.
  ReplicaLink* replica_link = nullptr;
  // ps_server --join: this server joins a running replicated job (a restart
  // or a spare): it restores no checkpoint; server/replica_joiner.h asks the
  // peers for the job and the core is filled by copies (BeginJoin).
  bool join = false;
};

// Updates that make one step of the learning-rate schedule
// (server/optimizer.h): num_workers in async and ssp when
// --async_lr_scaling resolves to workers for the dense optimizer (workers;
// auto for all but AdaGrad), else 1.
int PushesPerStep(const ServerOptions& options);

// The lookahead the optimizer runs with: momentum_lookahead when set; auto
// gives kLookaheadPerOtherWorker * (num_workers - 1) in async and ssp with
// SGD, momentum > 0 and no Nesterov, else 0 (sync always 0).
double LookaheadUpdates(const ServerOptions& options);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVER_OPTIONS_H_
