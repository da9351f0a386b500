// Schedules transfers (pushes or pulls) under a budget of bytes in flight:
// a transfer starts when it fits in the budget (or nothing is in flight);
// the others wait in priority order (earlier step, then lower order), then
// in submission order, and strictly: a waiting transfer is never overtaken
// by a later one. Workers give a transfer its step and the index of its
// first tensor, so the tensors the next forward pass needs first overtake
// big later ones that are still queued (the priority scheduling of P3 and
// ByteScheduler).
//
// Transfers of one group (a step's pushes to one server, say) may go as one:
//  - When one starts, the ready ones of its group waiting behind it go with
//    it, in line order, up to the grouping's bytes. They overtake the
//    transfers between, and may take the bytes in flight past the budget,
//    by at most those bytes (as a lone transfer larger than the budget
//    does); nothing else starts until the bytes in flight are back under
//    it. (In a line that backs up a finished transfer frees only its own
//    bytes: a group held to the budget would never grow.)
//  - While a group has a transfer in flight, its waiting ones are held back
//    until they add up to the grouping's bytes or the one in flight is done;
//    later transfers of other groups overtake them meanwhile. Transfers
//    handed over one by one (a layer's pushes as backward produces them)
//    thus gather into fewer, larger ones where a group's last one has not
//    come back yet, with no timer; full-sized ones still follow each other
//    without waiting (client/grpc_transfers.cc).
//
// Thread-safe. Transfers start on the thread that submits or that finishes
// an earlier transfer, never under the queue's lock.
#ifndef SHARDPS_CLIENT_TRANSFER_QUEUE_H_
#define SHARDPS_CLIENT_TRANSFER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
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
  // Starts the transfers of one group that go together, given their ids in
  // line order, and calls `finished` once when all are done.
  using StartGroup = std::function<void(std::vector<uint64_t> ids, std::function<void()> finished)>;
  struct Grouping {
    int64_t max_bytes = 0;  // of the transfers that go together; <= 0: each goes alone
    StartGroup start;
  };
  explicit TransferQueue(Budget budget) : budget_(budget) {}
  TransferQueue(Budget budget, Grouping grouping) : budget_(budget), grouping_(std::move(grouping)) {}

  // The transfer: starts the work and calls `finished` once when it is done.
  using Start = std::function<void(std::function<void()> finished)>;
  void Submit(TransferPriority priority, int64_t bytes, Start start);
  // A transfer of `group`, started by the grouping's `start` with `id`
  // (the caller's name for it) among the ids that go with it.
  void SubmitToGroup(TransferPriority priority, int64_t bytes, int64_t group, uint64_t id);

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
    Start start;  // empty for a transfer of a group
    bool grouped = false;
    int64_t group = 0;
    uint64_t id = 0;
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
    std::vector<uint64_t> ids;  // a group's transfers that go together (start is empty)
    int64_t group = 0;
  };
  // Pops what may start now; the caller starts it after unlocking.
  std::vector<Runnable> TakeRunnable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A group's transfers in line (in line order, with their bytes) and in flight.
  struct Group {
    std::set<Key, KeyLess> waiting;
    int64_t waiting_bytes = 0;
    int in_flight = 0;
  };
  // The group's transfers wait while one of them is in flight, until they
  // fill a transfer of the grouping's bytes.
  bool HeldBack(const Group& group) const;
  // `head` (a group's transfer that may start) and the transfers of its
  // group that go with it, taken off the line (the head is left to the
  // caller).
  Runnable TakeGroup(const Key& head) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A group's transfer is done.
  void GroupFinished(int64_t group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(std::vector<Runnable> ready);
  // Starts what may start after a change to the line.
  void Advance() ABSL_LOCKS_EXCLUDED(mu_);


  const Budget budget_;
  const Grouping grouping_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Key, Entry, KeyLess> line_ ABSL_GUARDED_BY(mu_);
  std::map<Ticket, TransferPriority> reserved_ ABSL_GUARDED_BY(mu_);  // ticket -> its place
  // The groups with transfers in line or in flight.
  absl::flat_hash_map<int64_t, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_TRANSFER_QUEUE_H_
