#include "server/step_capture.h"

namespace shardps {

bool StepCapture::Arm(const KeyTable& table, int64_t step) {
  {
    absl::MutexLock lock(&mu_);
    if (step_ != kNone) return true;  // under way, or complete and not taken yet
    step_ = step;
    copies_.assign(table.size(), std::nullopt);
    copied_ = 0;
    target_ = step;
  }
  // Keys that reached the step before the target was visible are copied
  // here; the others by OnVersion when they reach it.
  for (size_t i = 0; i < table.size(); ++i) {
    KeyState& k = table.key(i);
    absl::MutexLock key_lock(&k.mu);
    if (k.version > step) {
      Cancel();
      return false;
    }
    OnVersion(i, k);
  }
  return true;
}

void StepCapture::OnVersion(size_t index, const KeyState& k) {
  if (k.version != target_) return;
  absl::MutexLock lock(&mu_);
  if (step_ != k.version || index >= copies_.size() || copies_[index]) return;
  copies_[index] = KeyTable::CaptureKey(k);
  if (++copied_ == copies_.size()) target_ = kNone;
}

std::optional<std::pair<int64_t, std::vector<KeySnapshot>>> StepCapture::TakeComplete() {
  absl::MutexLock lock(&mu_);
  if (step_ == kNone || copied_ < copies_.size()) return std::nullopt;
  std::vector<KeySnapshot> keys;
  keys.reserve(copies_.size());
  for (auto& c : copies_) keys.push_back(*std::move(c));
  const int64_t step = step_;
  step_ = kNone;
  target_ = kNone;
  copies_.clear();
  copied_ = 0;
  return std::make_pair(step, std::move(keys));
}

bool StepCapture::CancelIfIncomplete() {
  absl::MutexLock lock(&mu_);
  if (step_ == kNone || copied_ == copies_.size()) return false;
  Clear();
  return true;
}

void StepCapture::Cancel() {
  absl::MutexLock lock(&mu_);
  Clear();
}

void StepCapture::Clear() {
  step_ = kNone;
  target_ = kNone;
  copies_.clear();
  copied_ = 0;
}

}  // namespace shardps
