// Runs closures on one background thread, each after a delay (retries with
// backoff). Closures not yet run when it is destroyed are dropped.
#ifndef SHARDPS_WORKER_DELAYED_EXECUTOR_H_
#define SHARDPS_WORKER_DELAYED_EXECUTOR_H_

#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardps {

class DelayedExecutor {
 public:
  DelayedExecutor();
  ~DelayedExecutor();
  DelayedExecutor(const DelayedExecutor&) = delete;
  DelayedExecutor& operator=(const DelayedExecutor&) = delete;

  void RunAfter(absl::Duration delay, std::function<void()> fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_DELAYED_EXECUTOR_H_
