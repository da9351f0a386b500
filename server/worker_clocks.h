// ssp and async: a worker's clock is the number of steps it has finished,
// and on one server a step is finished when the worker has pushed every key
// the server owns for it. Counts keys pushed per (worker, step) and moves
// the worker's clock in Membership when a step is complete. A worker that
// pushes only some keys never finishes a step; at most kOpenSteps steps are
// counted per worker, so its counts do not grow without bound.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_WORKER_CLOCKS_H_
#define SHARDPS_SERVER_WORKER_CLOCKS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/membership.h"

namespace shardps {

class WorkerClocks {
 public:
  // `membership` must outlive this object.
  WorkerClocks(int num_workers, Membership* membership) : membership_(membership), pushed_(num_workers) {}

  // `rank` pushed one more of the server's `num_keys` keys for `step`.
  void NotePushed(int rank, int64_t step, size_t num_keys) {
    bool finished = false;
    {
      absl::MutexLock lock(&mu_);
      std::map<int64_t, size_t>& per_step = pushed_[rank];
      finished = ++per_step[step] == num_keys;
      if (finished) per_step.erase(per_step.begin(), per_step.upper_bound(step));
      while (per_step.size() > kOpenSteps) per_step.erase(per_step.begin());
    }
    if (finished) membership_->AdvanceClock(rank, step + 1);
  }
  void ForgetAll() {
    absl::MutexLock lock(&mu_);
    for (auto& per_step : pushed_) per_step.clear();
  }
  // Steps `rank` has begun and not finished that are still counted.
  size_t OpenSteps(int rank) {
    absl::MutexLock lock(&mu_);
    return pushed_[rank].size();
  }

 private:
  // Far more than pull-ahead and retries keep open at once.
  static constexpr size_t kOpenSteps = 64;

  Membership* const membership_;
  absl::Mutex mu_;
  std::vector<std::map<int64_t, size_t>> pushed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_WORKER_CLOCKS_H_
