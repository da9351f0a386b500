// Checkpoints by time (server/shard_checkpointer.h, "By time"): the newest
// checkpoint step a worker heard the servers announce, which its
// connections send on every call (common/rpc_metadata.h,
// kCheckpointStepKey). Thread-safe.
#ifndef SHARDPS_CLIENT_CHECKPOINT_RELAY_H_
#define SHARDPS_CLIENT_CHECKPOINT_RELAY_H_

#include <optional>

#include "absl/synchronization/mutex.h"
#include "common/rpc_metadata.h"

namespace shardps {

class CheckpointRelay {
 public:
  // Keeps `heard` when it is newer (a later timeline, then a later step).
  void Note(const CheckpointStep& heard) {
    absl::MutexLock lock(&mu_);
    if (!newest_ || *newest_ < heard) newest_ = heard;
  }
  std::optional<CheckpointStep> Newest() const {
    absl::MutexLock lock(&mu_);
    return newest_;
  }
  void Forget() {
    absl::MutexLock lock(&mu_);
    newest_.reset();
  }

 private:
  mutable absl::Mutex mu_;
  std::optional<CheckpointStep> newest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_CHECKPOINT_RELAY_H_
