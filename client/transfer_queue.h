// Schedules transfers (pushes or pulls) under a budget of bytes in flight:
// a transfer starts when it fits in the budget (or nothing is in flight);
// the others wait, lowest priority value first, then in submission order,
// and strictly: a waiting transfer is never overtaken by a later one.
// Workers give a layer's transfer its first tensor index as priority, so the
// layers the next forward pass needs first overtake big later layers that
// are still queued (the priority scheduling of P3 and ByteScheduler).
//
// Thread-safe. Transfers start on the thread that submits or that finishes
// an earlier transfer, never under the queue's lock.
#ifndef SHARDPS_CLIENT_TRANSFER_QUEUE_H_
#define SHARDPS_CLIENT_TRANSFER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace shardps {

class TransferQueue {
 public:
  // `budget_bytes` <= 0: no budget, every transfer starts at once.
  explicit TransferQueue(int64_t budget_bytes) : budget_(budget_bytes) {}

  // The transfer: starts the work and calls `finished` once when it is done.
  using Start = std::function<void(std::function<void()> finished)>;
  void Submit(int64_t priority, int64_t bytes, Start start);

  int64_t in_flight_bytes() const {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }

 private:
  struct Waiting {
    int64_t priority;
    uint64_t order;
    int64_t bytes;
    Start start;
    bool operator>(const Waiting& o) const { return std::tie(priority, order) > std::tie(o.priority, o.order); }
  };
  // Pops what fits now; the caller starts it after unlocking.
  std::vector<Waiting> TakeRunnable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(std::vector<Waiting> ready);

  const int64_t budget_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::priority_queue<Waiting, std::vector<Waiting>, std::greater<Waiting>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_TRANSFER_QUEUE_H_
