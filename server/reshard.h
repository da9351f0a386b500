// A checkpoint of a job on N servers rewritten for M servers, so that the
// job restarts on M: dense keys are cut into M servers' chunks
// (common/key_partition.h), with their optimizer slots; each sparse table's
// rows, with their slots, go to the server their id hashes to
// (common/table_spec.h RowServer). The files are the shard checkpoints M
// servers restore from (shard-<id>-of-<M>-step-<T>.safetensors).
//
// Versions: a new chunk takes the largest version of the old chunks it
// covers (in sync they are all the step); a table's the largest of its
// parts. Workers' clocks (async and ssp): the smallest of each worker's
// clocks over the old servers.
#ifndef SHARDPS_SERVER_RESHARD_H_
#define SHARDPS_SERVER_RESHARD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/shard_checkpoint.h"

namespace shardps {

// The shards of `old` (every server's, in server order, as ReadShards
// returns them) as `num_servers` shards. INVALID_ARGUMENT for a server count
// below 1; FAILED_PRECONDITION when a key of the layout is missing.
absl::StatusOr<std::vector<ShardSnapshot>> Reshard(const std::vector<ShardSnapshot>& old, int num_servers);

// Reads the checkpoint of `step` (the newest every server holds when empty)
// in `dir` and writes it for `num_servers` servers into `out_dir` (which
// must not be `dir`). Returns the step written.
absl::StatusOr<int64_t> ReshardCheckpoint(const std::string& dir, std::optional<int64_t> step, int num_servers,
                                          const std::string& out_dir);

}  // namespace shardps

#endif  // SHARDPS_SERVER_RESHARD_H_
