#include "client/delayed_executor.h"

#include <vector>

namespace shardps {

DelayedExecutor::DelayedExecutor(Clock* clock) : clock_(clock), thread_([this] { Loop(); }) {}

DelayedExecutor::~DelayedExecutor() { Shutdown(); }

void DelayedExecutor::RunAfter(absl::Duration delay, std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      queue_.emplace(clock_->Now() + delay, std::move(fn));
      ++added_;
      return;
    }
  }
  fn();
}

std::vector<std::function<void()>> DelayedExecutor::TakeDue(absl::Time now) {
  std::vector<std::function<void()>> due;
  while (!queue_.empty() && queue_.begin()->first <= now) {
    due.push_back(std::move(queue_.begin()->second));
    queue_.erase(queue_.begin());
  }
  return due;
}

void DelayedExecutor::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    std::vector<std::function<void()>> due = TakeDue(clock_->Now());
    if (!due.empty()) {
      mu_.Unlock();
      for (auto& fn : due) fn();
      mu_.Lock();
      continue;
    }
    const absl::Time next = queue_.empty() ? absl::InfiniteFuture() : queue_.begin()->first;
    const uint64_t seen = added_;
    struct Wake {
      bool* stop;
      uint64_t* added;
      uint64_t seen;
    } wake{&stop_, &added_, seen};
    clock_->AwaitWithDeadline(
        &mu_, absl::Condition(+[](Wake* w) { return *w->stop || *w->added != w->seen; }, &wake), next);
  }
}

void DelayedExecutor::Shutdown() {
  std::vector<std::function<void()>> rest;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    rest = TakeDue(absl::InfiniteFuture());
  }
  thread_.join();
  for (auto& fn : rest) fn();
}

}  // namespace shardps
