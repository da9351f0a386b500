// Runs closures on one background thread, each once its delay has passed on
// the injected clock (retries with backoff). Shutdown() runs every closure
// still waiting at once, in order, so none is dropped: closures check for
// themselves whether their work is still wanted.
//
// Thread-safe.
#ifndef SHARDPS_CLIENT_DELAYED_EXECUTOR_H_
#define SHARDPS_CLIENT_DELAYED_EXECUTOR_H_

#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace shardps {

class DelayedExecutor {
 public:
  // `clock` must outlive the executor.
  explicit DelayedExecutor(Clock* clock);
  ~DelayedExecutor();  // Shutdown()
  DelayedExecutor(const DelayedExecutor&) = delete;
  DelayedExecutor& operator=(const DelayedExecutor&) = delete;

  // After Shutdown(), runs `fn` at once on the calling thread.
  void RunAfter(absl::Duration delay, std::function<void()> fn);
  // Runs what is waiting now and stops the thread. Idempotent.
  void Shutdown();

 private:
  void Loop();
  // The closures due now, removed from the queue. REQUIRES: mu_ held.
  std::vector<std::function<void()>> TakeDue(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;  // closures queued so far: wakes the loop
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_DELAYED_EXECUTOR_H_
