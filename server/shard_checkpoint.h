// A server's shard as a checkpoint: weights and optimizer slots of every key
// it owns, with the metadata needed to restore it (layout, versions, mode,
// the step it is labelled with, workers' clocks). Stored as one safetensors
// file per server and checkpointed step.
#ifndef SHARDPS_SERVER_SHARD_CHECKPOINT_H_
#define SHARDPS_SERVER_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_view.h"
#include "common/key_partition.h"
#include "common/layout.h"
#include "server/table_checkpoint.h"

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
  // Optimizer updates per schedule step (server/optimizer.h): a restart
  // resumes the same schedule only with the same value.
  int pushes_per_step = 1;
  // The job step this checkpoint holds. sync: every key's version. async
  // and ssp (where versions count pushes): the slowest live worker's clock
  // when it was taken, rounded down to the checkpoint interval.
  int64_t step = 0;
  int64_t timeline = 0;         // rewinds applied before it was taken.
  std::vector<int64_t> clocks;  // per worker rank: steps finished (async and ssp).
  std::vector<KeySnapshot> keys;  // in key order.
  std::vector<TableSnapshot> tables;  // one per layout.tables, in order.
};

// "<dir>/shard-<id>-of-<n>-step-<step>.safetensors".
std::string ShardCheckpointPath(const std::string& dir, int server_id, int num_servers, int64_t step);

// What a checkpoint file's name says: ShardCheckpointPath's file name read
// back. Anything else (another file, a number spelled otherwise, a
// negative step) is nullopt.
struct ShardCheckpointName {
  int server_id = 0;
  int num_servers = 0;
  int64_t step = 0;
};
std::optional<ShardCheckpointName> ParseShardCheckpointName(absl::string_view file_name);

// The steps of this server's checkpoint files in `dir`, ascending; empty
// when there are none or `dir` does not exist.
std::vector<int64_t> ListCheckpointSteps(const std::string& dir, int server_id, int num_servers);

// The name of a checkpoint file in `dir` of a job of another server count
// than `num_servers` (the first found), or "" when there is none.
std::string CheckpointOfOtherServerCount(const std::string& dir, int num_servers);

// Atomic (temporary file, fsync, rename).
absl::Status WriteShardCheckpoint(const std::string& path, const ShardSnapshot& shard);

// NOT_FOUND when there is no file; DATA_LOSS when it cannot be decoded.
absl::StatusOr<ShardSnapshot> ReadShardCheckpoint(const std::string& path);

// Before anything is sized by a checkpoint's layout (a damaged file's
// layout could ask for terabytes): DATA_LOSS naming `source` unless
// `shard` holds exactly the keys and values `map` gives the servers in
// `held` (a server's restore: its own, with backups it holds).
absl::Status CheckShardHolds(const KeyMap& map, const std::vector<int>& held, const ShardSnapshot& shard,
                             const std::string& source);
// The key map of a whole job's shards (merging, resharding; REQUIRES at
// least one), once they are checked against it: every key they hold is in
// the layout, as long as the map says, with optimizer slots as long as its
// weights and as many as the first key's, and every key of the layout is
// held (by one shard or, with --replicas > 1, several). DATA_LOSS otherwise.
absl::StatusOr<KeyMap> CoveredKeyMap(const std::vector<ShardSnapshot>& shards);

// Safetensors name of a key's weights ("<tensor>/<chunk>") and of its slots
// ("<tensor>/<chunk>/slot<i>").
std::string WeightsName(const Layout& layout, const ChunkKey& key);
std::string SlotName(const Layout& layout, const ChunkKey& key, int slot);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SHARD_CHECKPOINT_H_
