// Sync mode: a checkpoint holds one step exactly, on every server. Keys
// reach a step at different moments, so each key's state is copied at the
// moment it reaches the step being captured (under its own lock, by the
// thread that applied the step); once every key is copied the snapshot is
// complete, and the housekeeping thread writes it.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_STEP_CAPTURE_H_
#define SHARDPS_SERVER_STEP_CAPTURE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/key_table.h"

namespace shardps {

class StepCapture {
 public:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

  // The step being captured, or kNone.
  int64_t target() const { return target_; }

  // No capture under way and none complete waiting to be taken.
  bool Idle() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return step_ == kNone;
  }

  // Starts capturing `step` of `table`'s keys, unless a capture is under way
  // or a snapshot waits to be taken. Keys already at `step` are copied now;
  // when a key is already past it, the capture is dropped (false).
  bool Arm(const KeyTable& table, int64_t step);

  // Copies the key when it is at the target step and not copied yet.
  // REQUIRES: k.mu held; `index` is the key's index in the table.
  void OnVersion(size_t index, const KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);

  // The completed capture's step and keys (in key order), once.
  std::optional<std::pair<int64_t, std::vector<KeySnapshot>>> TakeComplete();

  // Drops any capture (a rewind replaced the keys).
  void Cancel();
  // Drops the capture under way, unless it is complete (then it waits to
  // be taken); true when one was dropped.
  bool CancelIfIncomplete();

 private:
  void Clear() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // no capture

  std::atomic<int64_t> target_{kNone};
  absl::Mutex mu_;
  int64_t step_ ABSL_GUARDED_BY(mu_) = kNone;
  std::vector<std::optional<KeySnapshot>> copies_ ABSL_GUARDED_BY(mu_);
  size_t copied_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_STEP_CAPTURE_H_
