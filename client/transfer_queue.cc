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

void TransferQueue::SubmitToGroup(TransferPriority priority, int64_t bytes, int64_t group, uint64_t id) {
  if (budget_.total <= 0) {
    grouping_.start({id}, [] {});
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    const Key key{priority, next_ticket_++};
    Entry e;
    e.ready = true;
    e.bytes = bytes;
    e.grouped = true;
    e.group = group;
    e.id = id;
    line_.emplace(key, std::move(e));
    Group& g = groups_[group];
    g.waiting.insert(key);
    g.waiting_bytes += bytes;
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
// later one (a group's transfer held back while its group has one in flight
// does not). Behind the first reservation the limit drops to the
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
    if (e.grouped && HeldBack(groups_.at(e.group))) {
      ++it;
      continue;
    }
    if (in_flight_ > 0 && in_flight_ + e.bytes > limit) break;
    Runnable r = e.grouped ? TakeGroup(it->first) : Runnable{e.bytes, std::move(e.start), {}, 0};
    in_flight_ += r.bytes;
    ready.push_back(std::move(r));
    it = line_.erase(it);  // still valid: TakeGroup erases only transfers behind it
  }
  return ready;
}

bool TransferQueue::HeldBack(const Group& group) const {
  return group.in_flight > 0 && group.waiting_bytes < grouping_.max_bytes;
}

// The group's other transfers are all behind the head: any ahead of it
// would have started before it, or held it back.
TransferQueue::Runnable TransferQueue::TakeGroup(const Key& head) {
  const Entry& first = line_.at(head);
  Runnable r{first.bytes, nullptr, {first.id}, first.group};
  Group& group = groups_.at(first.group);
  group.waiting.erase(head);
  for (auto m = group.waiting.begin(); m != group.waiting.end();) {
    auto entry = line_.find(*m);
    const int64_t bytes = entry->second.bytes;
    if (r.bytes + bytes > grouping_.max_bytes) break;
    r.bytes += bytes;
    r.ids.push_back(entry->second.id);
    line_.erase(entry);
    m = group.waiting.erase(m);
  }
  group.waiting_bytes -= r.bytes;
  ++group.in_flight;
  return r;
}

void TransferQueue::GroupFinished(int64_t group) {
  auto g = groups_.find(group);
  if (--g->second.in_flight == 0 && g->second.waiting.empty()) groups_.erase(g);
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
    const bool grouped = !r.ids.empty();
    const int64_t group = r.group;
    std::function<void()> finished = [this, bytes, grouped, group] {
      {
        absl::MutexLock lock(&mu_);
        in_flight_ -= bytes;
        if (grouped) GroupFinished(group);
      }
      Advance();
    };
    if (grouped) {
      grouping_.start(std::move(r.ids), std::move(finished));
    } else {
      r.start(std::move(finished));
    }
  }
}

}  // namespace shardps
