// A server's shard as a checkpoint: weights and optimizer slots of every key
// it owns, with the metadata needed to restore it (layout, versions, mode).
// Stored as one safetensors file per server.
#ifndef SHARDPS_SERVER_SHARD_CHECKPOINT_H_
#define SHARDPS_SERVER_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_view.h"
#include "common/key_partition.h"
#include "common/layout.h"

namespace shardps {

struct KeySnapshot {
  ChunkKey key;
  int64_t version = 0;
  std::vector<float> weights;
  std::vector<std::vector<float>> slots;
};

struct ShardSnapshot {
  int server_id = 0;
  int num_servers = 1;
  Mode mode = Mode::kSync;
  Layout layout;
  int64_t partition_bytes = 0;
  std::string optimizer;
  std::vector<KeySnapshot> keys;  // in key order.

  // The smallest key version: the step the whole shard has reached.
  int64_t Step() const;
};

// "<dir>/shard-<id>-of-<n>.safetensors".
std::string ShardCheckpointPath(const std::string& dir, int server_id, int num_servers);

// Atomic (temporary file, fsync, rename).
absl::Status WriteShardCheckpoint(const std::string& path, const ShardSnapshot& shard);

// NOT_FOUND when there is no file; DATA_LOSS when it cannot be decoded.
absl::StatusOr<ShardSnapshot> ReadShardCheckpoint(const std::string& path);

// Safetensors name of a key's weights ("<tensor>/<chunk>") and of its slots
// ("<tensor>/<chunk>/slot<i>").
std::string WeightsName(const Layout& layout, const ChunkKey& key);
std::string SlotName(const Layout& layout, const ChunkKey& key, int slot);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SHARD_CHECKPOINT_H_
