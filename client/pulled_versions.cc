#include "client/pulled_versions.h"

namespace shardps {

void PulledVersions::Record(const ChunkKey& key, int64_t step, int64_t version) {
  absl::MutexLock lock(&mu_);
  Newest& newest = pulled_[key];
  if (step == newest[0].step) {
    newest[0].version = version;  // a pull of the same step again: the later answer
  } else if (step > newest[0].step) {
    newest[1] = newest[0];
    newest[0] = {step, version};
  } else if (step >= newest[1].step) {
    newest[1] = {step, version};  // answered after a later step's pull
  } else {
    newest = {Pulled{step, version}, Pulled{}};  // the job rewound to an earlier step
  }
}

std::optional<int64_t> PulledVersions::For(const ChunkKey& key, int64_t step) const {
  absl::MutexLock lock(&mu_);
  auto it = pulled_.find(key);
  if (it == pulled_.end()) return std::nullopt;
  for (const Pulled& p : it->second) {
    if (p.step >= 0 && p.step <= step) return p.version;
  }
  return std::nullopt;
}

}  // namespace shardps
