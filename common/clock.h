// Time source, injected so that tests of heartbeats, timeouts and backoff
// advance a ManualClock instead of sleeping. Implementations are
// thread-safe.
#ifndef SHARDPS_COMMON_CLOCK_H_
#define SHARDPS_COMMON_CLOCK_H_

#include <algorithm>
#include <functional>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardps {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Waits until `cond` holds (true) or Now() reaches `deadline` (false).
  // `cond` is evaluated with `mu` held, as absl::Mutex::Await does.
  // REQUIRES: mu held.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

// A clock that moves only when told to. Waiters notice an Advance() within
// a millisecond of real time.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override {
    while (!cond.Eval()) {
      if (Now() >= deadline) return false;
      mu->AwaitWithTimeout(cond, absl::Milliseconds(1));
    }
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// A flag that background loops wait on between rounds: Stop() ends every
// wait at once.
class StopFlag {
 public:
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  bool stopped() {
    absl::MutexLock lock(&mu_);
    return stopped_;
  }
  // Waits until Stop() (true) or until `clock` reaches `deadline` (false).
  bool WaitUntil(Clock& clock, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    return clock.AwaitWithDeadline(&mu_, absl::Condition(&stopped_), deadline);
  }
  // Calls fn() every `period` of `clock`, the first at `start` + `period`,
  // until Stop(). A loop on a thread of its own takes `start` before the
  // thread starts: taken on the thread, the schedule would begin however
  // late the thread first ran, after a test's clock had already moved.
  // Due times are fixed before each round, so a clock that moves on while a
  // round runs is seen; rounds missed while the process did not run are not
  // made up.
  void RunEvery(Clock& clock, absl::Time start, absl::Duration period, const std::function<void()>& fn) {
    for (absl::Time due = start + period; !WaitUntil(clock, due); due = std::max(due + period, clock.Now())) {
      fn();
    }
  }

 private:
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_CLOCK_H_
