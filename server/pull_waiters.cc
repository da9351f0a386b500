#include "server/pull_waiters.h"

#include <algorithm>

namespace shardps {

std::optional<PendingPull> PullWaiters::AddUnlessReady(PendingPull pull, const IsReady& ready) {
  absl::MutexLock lock(&mu_);
  if (ready(pull)) return pull;
  waiting_.push_back(std::move(pull));
  return std::nullopt;
}

std::vector<PendingPull> PullWaiters::TakeReady(const IsReady& ready) {
  std::vector<PendingPull> out;
  absl::MutexLock lock(&mu_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (ready(*it)) {
      out.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<PendingPull> PullWaiters::TakeExpired(absl::Time now) {
  std::vector<PendingPull> out;
  absl::MutexLock lock(&mu_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->deadline <= now) {
      out.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<PendingPull> PullWaiters::TakeAll() {
  absl::MutexLock lock(&mu_);
  std::vector<PendingPull> out(std::make_move_iterator(waiting_.begin()),
                               std::make_move_iterator(waiting_.end()));
  waiting_.clear();
  return out;
}

int64_t PullWaiters::WaitingPulls() {
  absl::MutexLock lock(&mu_);
  return std::count_if(waiting_.begin(), waiting_.end(), [](const PendingPull& p) { return !p.push_ack; });
}

}  // namespace shardps
