// One server's checkpoints on disk: a safetensors file per checkpointed
// step (server/shard_checkpoint.h names them), of which the newest `keep`
// are kept, so that a job can return to a step every shard still holds.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_CHECKPOINT_STORE_H_
#define SHARDPS_SERVER_CHECKPOINT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/shard_checkpoint.h"

namespace shardps {

class CheckpointStore {
 public:
  // Creates `dir` when it is missing and checks that a file can be written
  // there: FAILED_PRECONDITION naming the path and the OS error otherwise.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(const std::string& dir, int server_id,
                                                               int num_servers, int keep);

  // Steps of the checkpoints on disk, ascending.
  std::vector<int64_t> Steps() const;
  // Writes `shard` as the checkpoint of shard.step (atomically; replacing
  // one of the same step), then deletes all but the newest `keep`.
  // Returns the file's path.
  absl::StatusOr<std::string> Write(const ShardSnapshot& shard);
  // NOT_FOUND naming the steps there are when there is no checkpoint of
  // `step`; DATA_LOSS when it cannot be decoded.
  absl::StatusOr<ShardSnapshot> Read(int64_t step) const;
  // Deletes the checkpoints of steps after `step`: they belong to training
  // that a rewind abandoned.
  void DiscardAfter(int64_t step);
  // Renames the checkpoint of `step` to its path + ".damaged" (it does not
  // decode): no longer one of Steps(), kept for a person to look at.
  // Returns the new path.
  std::string SetAside(int64_t step);

  const std::string& dir() const { return dir_; }

 private:
  CheckpointStore(std::string dir, int server_id, int num_servers, int keep)
      : dir_(std::move(dir)), server_id_(server_id), num_servers_(num_servers), keep_(keep) {}
  std::string PathOf(int64_t step) const { return ShardCheckpointPath(dir_, server_id_, num_servers_, step); }

  const std::string dir_;
  const int server_id_, num_servers_, keep_;
  mutable absl::Mutex mu_;  // one writer or deleter at a time
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_CHECKPOINT_STORE_H_
