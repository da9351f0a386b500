#include "client/transfer_queue.h"

#include <utility>

namespace shardps {

void TransferQueue::Submit(int64_t priority, int64_t bytes, Start start) {
  if (budget_ <= 0) {
    start([] {});
    return;
  }
  std::vector<Waiting> ready;
  {
    absl::MutexLock lock(&mu_);
    waiting_.push(Waiting{priority, next_order_++, bytes, std::move(start)});
    ready = TakeRunnable();
  }
  Run(std::move(ready));
}

std::vector<TransferQueue::Waiting> TransferQueue::TakeRunnable() {
  std::vector<Waiting> ready;
  while (!waiting_.empty() && (in_flight_ == 0 || in_flight_ + waiting_.top().bytes <= budget_)) {
    ready.push_back(waiting_.top());
    waiting_.pop();
    in_flight_ += ready.back().bytes;
  }
  return ready;
}

void TransferQueue::Run(std::vector<Waiting> ready) {
  for (Waiting& w : ready) {
    const int64_t bytes = w.bytes;
    w.start([this, bytes] {
      std::vector<Waiting> next;
      {
        absl::MutexLock lock(&mu_);
        in_flight_ -= bytes;
        next = TakeRunnable();
      }
      Run(std::move(next));
    });
  }
}

}  // namespace shardps
