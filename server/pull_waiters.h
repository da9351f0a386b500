// Pulls that wait: in sync mode for a key version, in ssp mode for the
// slowest worker's clock; and, with --replicas > 1, pushes' answers, which
// wait for the keys' next copy (PendingPull::push_ack). A pull is added unless it is
// ready already, checked under the same lock that later pokes take, so no
// wake-up is lost.
//
// Thread-safe. The completion callbacks are never run here: the Take*
// methods hand pulls back to the caller, which completes them without locks.
#ifndef SHARDPS_SERVER_PULL_WAITERS_H_
#define SHARDPS_SERVER_PULL_WAITERS_H_

#include <functional>
#include <list>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/parameter_server.h"

namespace shardps {

struct PendingPull {
  int rank = 0;
  int64_t step = 0;
  std::vector<ChunkKey> keys;
  int value_bytes = 4;  // on the wire, per pulled value; 0 for an await
  bool after_own_push = false;  // async, ssp: also wait for this worker's push of step - 1
  absl::Time deadline;
  ParameterServer::PullDone done;
  // A push's answer, held until the keys' next copy includes the worker's
  // older pushes (ParameterServer::Push): it reads and counts nothing.
  bool push_ack = false;
};

class PullWaiters {
 public:
  using IsReady = std::function<bool(const PendingPull&)>;

  // Returns the pull back when `ready` says it is ready; otherwise keeps it.
  std::optional<PendingPull> AddUnlessReady(PendingPull pull, const IsReady& ready);
  // Removes and returns the pulls that are ready now.
  std::vector<PendingPull> TakeReady(const IsReady& ready);
  // Removes and returns the pulls whose deadline is at or before `now`.
  std::vector<PendingPull> TakeExpired(absl::Time now);
  std::vector<PendingPull> TakeAll();
  // The pulls waiting now (push answers held for the backup not counted).
  int64_t WaitingPulls();

 private:
  absl::Mutex mu_;
  std::list<PendingPull> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PULL_WAITERS_H_
