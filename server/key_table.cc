#include "server/key_table.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/payload_validation.h"

namespace shardps {

KeyTable::KeyTable(KeyMap map, int server_id, int num_slots, int num_workers, std::vector<int> held)
    : map_(std::move(map)), server_id_(server_id), held_(held.empty() ? std::vector<int>{server_id} : std::move(held)) {
  for (const ChunkInfo& c : map_.chunks()) {  // key order
    if (std::find(held_.begin(), held_.end(), c.server) == held_.end()) continue;
    keys_.push_back(std::make_unique<KeyState>(c, keys_.size(), num_slots, num_workers));
    by_key_[c.key] = keys_.back().get();
  }
}

int64_t KeyTable::owned_bytes() const {
  int64_t bytes = 0;
  for (int p : held_) bytes += map_.BytesOfServer(p);
  return bytes;
}

absl::StatusOr<KeyState*> KeyTable::Find(const ChunkKey& key) const {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return it->second;
  absl::Status not_owned = CheckHeld(map_, key, server_id_, held_);
  return not_owned.ok() ? absl::InternalError(absl::StrCat("owned key ", KeyName(key), " has no state")) : not_owned;
}

std::pair<int64_t, int64_t> KeyTable::VersionRange() const {
  if (keys_.empty()) return {0, 0};
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const auto& k : keys_) {
    const int64_t v = k->version.load();
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {lo, hi};
}

KeySnapshot KeyTable::CaptureKey(const KeyState& k) {
  return KeySnapshot{k.info.key, k.version, *k.weights, k.slots};
}

std::vector<KeySnapshot> KeyTable::Capture() const {
  std::vector<KeySnapshot> out;
  out.reserve(keys_.size());
  for (const auto& k : keys_) {
    absl::MutexLock lock(&k->mu);
    out.push_back(CaptureKey(*k));
  }
  return out;
}

absl::Status KeyTable::Restore(std::vector<KeySnapshot> keys, const std::string& source) {
  if (keys.size() != keys_.size()) {
    return absl::DataLossError(
        absl::StrCat(source, " holds ", keys.size(), " keys; this server owns ", keys_.size()));
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    const KeyState& k = *keys_[i];
    const KeySnapshot& s = keys[i];
    const bool slots_fit = s.slots.size() == k.slots.size() &&
                           std::all_of(s.slots.begin(), s.slots.end(), [&](const std::vector<float>& slot) {
                             return static_cast<int64_t>(slot.size()) == k.info.length;
                           });
    if (!(s.key == k.info.key) || static_cast<int64_t>(s.weights.size()) != k.info.length || !slots_fit) {
      return absl::DataLossError(absl::StrCat(source, " does not match key ", KeyName(k.info.key)));
    }
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    KeyState& k = *keys_[i];
    KeySnapshot& s = keys[i];
    absl::MutexLock lock(&k.mu);
    k.weights = std::make_shared<std::vector<float>>(std::move(s.weights));
    k.spare.reset();
    k.slots = std::move(s.slots);
    k.version = s.version;
    k.replicated_version = s.version;
    k.replicated_weights.reset();
    std::fill(k.last_pushed_step.begin(), k.last_pushed_step.end(), -1);
    std::fill(k.last_pulled_version.begin(), k.last_pulled_version.end(), -1);
    std::fill(k.replicated_pushed_step.begin(), k.replicated_pushed_step.end(), -1);
    k.grad_sum.clear();
    k.contributed.clear();
    k.contributors = 0;
    k.next_rank = 0;
    k.held.clear();
  }
  return absl::OkStatus();
}

}  // namespace shardps
