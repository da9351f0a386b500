#include "worker/delayed_executor.h"

#include "absl/time/clock.h"

namespace shardps {

DelayedExecutor::DelayedExecutor() : thread_([this] { Loop(); }) {}

DelayedExecutor::~DelayedExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DelayedExecutor::RunAfter(absl::Duration delay, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.emplace(absl::Now() + delay, std::move(fn));
}

void DelayedExecutor::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time next = queue_.empty() ? absl::Now() + absl::Milliseconds(50) : queue_.begin()->first;
    if (next > absl::Now()) {
      mu_.AwaitWithDeadline(absl::Condition(+[](bool* stop) { return *stop; }, &stop_),
                            std::min(next, absl::Now() + absl::Milliseconds(50)));
      continue;
    }
    std::function<void()> fn = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    mu_.Unlock();
    fn();
    mu_.Lock();
  }
}

}  // namespace shardps
