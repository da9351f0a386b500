#include "client/transfer_queue.h"

#include <algorithm>
#include <utility>

namespace shardps {

void TransferQueue::Submit(TransferPriority priority, int64_t bytes, Start start) {
  if (budget_.total <= 0) {
    start([] {});
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    line_.emplace(Key{priority, next_ticket_++}, Entry{true, bytes, std::move(start)});
  }
  Advance();
}

TransferQueue::Ticket TransferQueue::Reserve(TransferPriority priority) {
  absl::MutexLock lock(&mu_);
  const Ticket ticket = next_ticket_++;
  if (budget_.total <= 0) return ticket;  // nothing waits: nothing to hold a place in
  line_.emplace(Key{priority, ticket}, Entry{});
  reserved_.emplace(ticket, priority);
  return ticket;
}

void TransferQueue::Submit(Ticket ticket, int64_t bytes, Start start) {
  if (budget_.total <= 0) {
    start([] {});
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    auto r = reserved_.find(ticket);
    if (r == reserved_.end()) return;  // unknown or already used: a caller's bug, nothing to start
    line_[Key{r->second, ticket}] = Entry{true, bytes, std::move(start)};
    reserved_.erase(r);
  }
  Advance();
}

void TransferQueue::Cancel(Ticket ticket) {
  {
    absl::MutexLock lock(&mu_);
    auto r = reserved_.find(ticket);
    if (r == reserved_.end()) return;
    line_.erase(Key{r->second, ticket});
    reserved_.erase(r);
  }
  Advance();
}

// In priority order, strictly: a transfer that does not fit holds back every
// later one. Behind the first reservation the limit drops to the
// reservation allowance; one transfer always fits when nothing is in flight.
std::vector<TransferQueue::Runnable> TransferQueue::TakeRunnable() {
  std::vector<Runnable> ready;
  int64_t limit = budget_.total;
  for (auto it = line_.begin(); it != line_.end();) {
    Entry& e = it->second;
    if (!e.ready) {
      limit = std::min(limit, budget_.behind_reservation);
      ++it;
      continue;
    }
    if (in_flight_ > 0 && in_flight_ + e.bytes > limit) break;
    in_flight_ += e.bytes;
    ready.push_back({e.bytes, std::move(e.start)});
    it = line_.erase(it);
  }
  return ready;
}

void TransferQueue::Advance() {
  std::vector<Runnable> ready;
  {
    absl::MutexLock lock(&mu_);
    ready = TakeRunnable();
  }
  Run(std::move(ready));
}

void TransferQueue::Run(std::vector<Runnable> ready) {
  for (Runnable& r : ready) {
    const int64_t bytes = r.bytes;
    r.start([this, bytes] {
      {
        absl::MutexLock lock(&mu_);
        in_flight_ -= bytes;
      }
      Advance();
    });
  }
}

}  // namespace shardps
