// The whole model from the shard checkpoints of one step: every server's
// shard-<id>-of-<n>-step-<T>.safetensors in a directory, each key's chunk put
// back at its place in its tensor (common/key_partition.h), written as one
// safetensors file that other frameworks load: the layout's tensor names,
// their true shapes, float32, and the step in the metadata. A sparse table
// becomes two tensors: "<table>.ids" (I64, ascending) and "<table>.rows"
// (F32, ids x dim). Optimizer slots are left out.
#ifndef SHARDPS_SERVER_MODEL_EXPORT_H_
#define SHARDPS_SERVER_MODEL_EXPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "server/shard_checkpoint.h"

namespace shardps {

struct MergedTable {
  std::vector<int64_t> ids;  // ascending
  std::vector<float> rows;   // ids.size() x dim
};

struct MergedModel {
  Layout layout;
  int64_t step = 0;
  int num_servers = 0;
  std::string mode;
  std::vector<std::vector<float>> tensors;  // per layout tensor, all its values
  std::vector<MergedTable> tables;          // per layout table, every server's rows
};

// The checkpointed steps that every shard in `dir` holds, ascending.
absl::StatusOr<std::vector<int64_t>> CommonCheckpointSteps(const std::string& dir);

// Every server's shard of `step` (the newest step every shard holds when
// empty), in server order, checked to agree (layout, mode, chunk size).
absl::StatusOr<std::vector<ShardSnapshot>> ReadShards(const std::string& dir, std::optional<int64_t> step);

// Merges the shards of `step` (the newest step every shard holds when
// empty). NOT_FOUND when there are no shards or no such step;
// FAILED_PRECONDITION when the shards disagree (layout, mode, chunk size,
// server count) or a key is missing or held twice, naming it.
absl::StatusOr<MergedModel> MergeShards(const std::string& dir, std::optional<int64_t> step);

absl::Status WriteModel(const std::string& path, const MergedModel& model);

}  // namespace shardps

#endif  // SHARDPS_SERVER_MODEL_EXPORT_H_
