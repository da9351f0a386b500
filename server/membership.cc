#include "server/membership.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace shardps {

Membership::Membership(int num_workers, absl::Duration timeout, absl::Duration pause_threshold, Clock* clock)
    : timeout_(timeout), pause_threshold_(pause_threshold), clock_(clock), workers_(num_workers) {
  absl::MutexLock lock(&mu_);
  last_tick_ = clock_->Now();
  for (Worker& w : workers_) {
    // Not registered yet: expected, so the first sync step waits for every
    // worker, but never forever.
    w.live = true;
    w.last_seen = last_tick_;
  }
}

uint64_t Membership::Register(int rank, int64_t start_step) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[rank];
  uint64_t session = 0;
  while (session == 0) session = absl::Uniform<uint64_t>(bitgen_);
  w.live = true;
  w.session = session;
  w.last_seen = clock_->Now();
  w.start_step = start_step;
  w.clock = std::max(w.clock, start_step);
  return session;
}

absl::StatusOr<int> Membership::Touch(uint64_t session_id) {
  absl::MutexLock lock(&mu_);
  for (size_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.session != session_id || session_id == 0) continue;
    if (!w.live) {
      return absl::AbortedError(absl::StrCat(
          "session ", session_id, " of worker ", r,
          " expired: silent for longer than the worker timeout; register again"));
    }
    w.last_seen = clock_->Now();
    return static_cast<int>(r);
  }
  return absl::AbortedError(
      absl::StrCat("unknown session ", session_id, "; register first"));
}

absl::Duration Membership::NoteTick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  const absl::Duration gap = now - last_tick_;
  last_tick_ = now;
  if (gap <= pause_threshold_) return absl::ZeroDuration();
  for (Worker& w : workers_) w.last_seen = std::max(w.last_seen, std::min(now, w.last_seen + gap));
  return gap;
}

std::vector<int> Membership::ExpireSilent() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<int> dead;
  for (size_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.live && now - w.last_seen > timeout_) {
      w.live = false;
      ++dead_total_;
      dead.push_back(static_cast<int>(r));
    }
  }
  return dead;
}

void Membership::Reset(int64_t step) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (Worker& w : workers_) w = Worker{true, 0, now, step, step};
}

std::vector<bool> Membership::RequiredForStep(int64_t step) {
  absl::MutexLock lock(&mu_);
  std::vector<bool> required(workers_.size());
  for (size_t r = 0; r < workers_.size(); ++r) {
    required[r] = workers_[r].live && workers_[r].start_step <= step;
  }
  return required;
}

void Membership::AdvanceClock(int rank, int64_t clock) {
  absl::MutexLock lock(&mu_);
  workers_[rank].clock = std::max(workers_[rank].clock, clock);
}

void Membership::RestoreClocks(const std::vector<int64_t>& clocks) {
  absl::MutexLock lock(&mu_);
  for (size_t r = 0; r < workers_.size() && r < clocks.size(); ++r) workers_[r].clock = clocks[r];
}

std::vector<int64_t> Membership::Clocks() {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> out;
  for (const Worker& w : workers_) out.push_back(w.clock);
  return out;
}

int64_t Membership::ClockOf(int rank) {
  absl::MutexLock lock(&mu_);
  return workers_[rank].clock;
}

int64_t Membership::MinLiveClock() {
  absl::MutexLock lock(&mu_);
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  for (const Worker& w : workers_) {
    if (w.live) min_clock = std::min(min_clock, w.clock);
  }
  return min_clock;
}

int64_t Membership::MaxClock() {
  absl::MutexLock lock(&mu_);
  int64_t max_clock = 0;
  for (const Worker& w : workers_) max_clock = std::max(max_clock, w.clock);
  return max_clock;
}

int Membership::LiveCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const Worker& w) { return w.live; }));
}

int64_t Membership::DeadTotal() {
  absl::MutexLock lock(&mu_);
  return dead_total_;
}

}  // namespace shardps
