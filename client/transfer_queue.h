// Schedules transfers (pushes or pulls) under a budget of bytes in flight:
// a transfer starts when it fits in the budget (or nothing is in flight);
// the others wait in priority order (earlier step, then lower order), then
// in submission order, and strictly: a waiting transfer is never overtaken
// by a later one. Workers give a transfer its step and the index of its
// first tensor, so the tensors the next forward pass needs first overtake
// big later ones that are still queued (the priority scheduling of P3 and
// ByteScheduler).
//
// Thread-safe. Transfers start on the thread that submits or that finishes
// an earlier transfer, never under the queue's lock.
#ifndef SHARDPS_CLIENT_TRANSFER_QUEUE_H_
#define SHARDPS_CLIENT_TRANSFER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace shardps {

struct TransferPriority {
  int64_t step = 0;
  int64_t order = 0;  // the first tensor's index: forward order
  // Among equals, the server's place in this worker's ring: (server - rank
  // - 1) mod servers. Workers run in step with each other; taking the
  // servers of one transfer in ring order, each from its own starting point,
  // spreads their requests over the servers instead of sending them all to
  // one server's port at once.
  int64_t ring = 0;
  bool operator>(const TransferPriority& o) const {
    return std::tie(step, order, ring) > std::tie(o.step, o.order, o.ring);
  }
};

class TransferQueue {
 public:
  struct Budget {
    int64_t total = 0;  // bytes in flight at once; <= 0: no budget, every transfer starts at once
    // What may be in flight while a reservation heads the line (at least one
    // transfer when nothing is).
    int64_t behind_reservation = 0;
  };
  explicit TransferQueue(Budget budget) : budget_(budget) {}

  // The transfer: starts the work and calls `finished` once when it is done.
  using Start = std::function<void(std::function<void()> finished)>;
  void Submit(TransferPriority priority, int64_t bytes, Start start);

  // A place in line for a transfer that is not ready yet (weights still
  // awaited). While a reservation heads the line, later transfers wait for
  // it, except that one may start when nothing is in flight, so that the
  // link does not idle: the transfer the next forward pass needs first is
  // then queued behind at most one request.
  using Ticket = uint64_t;
  Ticket Reserve(TransferPriority priority);
  // The reserved transfer is ready; it keeps its place in line.
  void Submit(Ticket ticket, int64_t bytes, Start start);
  // The reserved transfer will not come (its await failed).
  void Cancel(Ticket ticket);

  int64_t in_flight_bytes() const {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }

 private:
  struct Entry {
    bool ready = false;  // false: a reservation
    int64_t bytes = 0;
    Start start;
  };
  using Key = std::pair<TransferPriority, Ticket>;
  struct KeyLess {
    bool operator()(const Key& a, const Key& b) const {
      if (b.first > a.first) return true;
      if (a.first > b.first) return false;
      return a.second < b.second;
    }
  };
  struct Runnable {
    int64_t bytes;
    Start start;
  };
  // Pops what may start now; the caller starts it after unlocking.
  std::vector<Runnable> TakeRunnable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(std::vector<Runnable> ready);
  // Starts what may start after a change to the line.
  void Advance() ABSL_LOCKS_EXCLUDED(mu_);


  const Budget budget_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Key, Entry, KeyLess> line_ ABSL_GUARDED_BY(mu_);
  std::map<Ticket, TransferPriority> reserved_ ABSL_GUARDED_BY(mu_);  // ticket -> its place
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_TRANSFER_QUEUE_H_
