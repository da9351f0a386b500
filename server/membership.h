// Workers' sessions, liveness and clocks on one server.
//
// A worker registers and gets a session id; every call counts as a heartbeat.
// A worker silent for longer than the timeout is dead: its session is dropped
// and its calls answer ABORTED until it registers again. A worker that
// registers again gets a new session and starts at the step it is given.
// A worker that has not registered yet counts as live (expected) until it has
// been silent for the timeout since construction.
//
// Silence is judged by the server's own liveness, not by the wall clock
// alone: NoteTick() is called every housekeeping tick, and a gap between
// ticks longer than the pause threshold (the process was stopped or starved)
// is not counted against any worker.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_MEMBERSHIP_H_
#define SHARDPS_SERVER_MEMBERSHIP_H_

#include <cstdint>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace shardps {

class Membership {
 public:
  // `clock` must outlive this object.
  Membership(int num_workers, absl::Duration timeout, absl::Duration pause_threshold, Clock* clock);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // New session for `rank`, replacing any earlier one; the worker's clock and
  // its first step to contribute to are `start_step`.
  // REQUIRES: 0 <= rank < num_workers.
  uint64_t Register(int rank, int64_t start_step);

  // Counts as a heartbeat. Returns the rank, or ABORTED when the session is
  // unknown or its worker was declared dead.
  absl::StatusOr<int> Touch(uint64_t session_id);

  // Called every housekeeping tick. Returns how long the server did not run
  // when the gap since the last tick exceeds the pause threshold (that time
  // is then not counted as any worker's silence), else zero.
  absl::Duration NoteTick();

  // Declares dead every worker silent for longer than the timeout; returns
  // their ranks.
  std::vector<int> ExpireSilent();

  // Forgets every session (workers register again) and expects every worker
  // afresh, at clock and first step `step`: after a rewind or a restore.
  void Reset(int64_t step);

  // Ranks that must contribute to a sync step: live and registered at or
  // before that step.
  std::vector<bool> RequiredForStep(int64_t step);

  // Raises `rank`'s clock (finished steps) to at least `clock`.
  void AdvanceClock(int rank, int64_t clock);
  // Sets every worker's clock (a restored checkpoint's). REQUIRES: one per rank.
  void RestoreClocks(const std::vector<int64_t>& clocks);
  std::vector<int64_t> Clocks();
  int64_t ClockOf(int rank);
  // Smallest clock among live workers; INT64_MAX when none is live.
  int64_t MinLiveClock();
  // Largest clock any worker has reached.
  int64_t MaxClock();

  int LiveCount();
  int64_t DeadTotal();

 private:
  struct Worker {
    bool live = false;
    uint64_t session = 0;
    absl::Time last_seen;
    int64_t start_step = 0;
    int64_t clock = 0;
  };

  // Constant after construction.
  const absl::Duration timeout_;
  const absl::Duration pause_threshold_;
  Clock* const clock_;

  absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  absl::Time last_tick_ ABSL_GUARDED_BY(mu_);
  int64_t dead_total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_MEMBERSHIP_H_
