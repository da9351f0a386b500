// The keys one server owns: their states in key order, found by key, and
// the shard as plain values for checkpoints and rewinds.
//
// Built once (by the first Init or by a restore) and never resized, so the
// table itself is read without locks; each KeyState has its own lock.
#ifndef SHARDPS_SERVER_KEY_TABLE_H_
#define SHARDPS_SERVER_KEY_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/key_partition.h"
#include "server/key_state.h"
#include "server/shard_checkpoint.h"

namespace shardps {

class KeyTable {
 public:
  // The keys that `map` gives `server_id`, zero-filled, each with
  // `num_slots` optimizer slots; with replication, also those of the
  // primaries it backs up (`held`: the primaries whose keys it holds, itself
  // first; {server_id} without replication).
  KeyTable(KeyMap map, int server_id, int num_slots, int num_workers, std::vector<int> held = {});
  KeyTable(const KeyTable&) = delete;
  KeyTable& operator=(const KeyTable&) = delete;

  const KeyMap& map() const { return map_; }
  size_t size() const { return keys_.size(); }
  KeyState& key(size_t index) const { return *keys_[index]; }
  // NOT_FOUND naming the key when this server does not hold it.
  absl::StatusOr<KeyState*> Find(const ChunkKey& key) const;
  // REQUIRES: this server holds `key`.
  KeyState& at(const ChunkKey& key) const { return *by_key_.at(key); }

  // {smallest, largest} key version.
  std::pair<int64_t, int64_t> VersionRange() const;
  int64_t owned_bytes() const;  // of every key held
  const std::vector<int>& held() const { return held_; }

  // Every key's version, weights and slots, each read under its own lock.
  std::vector<KeySnapshot> Capture() const;
  // One key's state. REQUIRES: k.mu held.
  static KeySnapshot CaptureKey(const KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Replaces every key's state by `keys` (in key order) and forgets pushes
  // in progress. DATA_LOSS naming `source` when `keys` does not match the
  // table; then nothing is changed.
  absl::Status Restore(std::vector<KeySnapshot> keys, const std::string& source);

 private:
  const KeyMap map_;
  const int server_id_;
  const std::vector<int> held_;
  std::vector<std::unique_ptr<KeyState>> keys_;
  absl::flat_hash_map<ChunkKey, KeyState*> by_key_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_KEY_TABLE_H_
