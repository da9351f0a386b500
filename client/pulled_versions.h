// The versions of the weights a worker's pulls answered, per key and step,
// so that each push can name the version its gradient was computed from
// (PushRequest's Chunk.base_version): the server counts a push's staleness
// from it exactly, whatever else the worker pulled in between (the next
// step's weights, prefetched while this step's pushes leave).
//
// Thread-safe.
#ifndef SHARDPS_CLIENT_PULLED_VERSIONS_H_
#define SHARDPS_CLIENT_PULLED_VERSIONS_H_

#include <array>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/key_partition.h"

namespace shardps {

class PulledVersions {
 public:
  // A pull for `step` answered `version` of `key`. A step older than both
  // remembered ones (the job rewound) forgets them.
  void Record(const ChunkKey& key, int64_t step, int64_t version);
  // The version that the newest pull for a step <= `step` answered of `key`
  // (a push of step t names the weights pulled for t); none when no such
  // pull is remembered.
  std::optional<int64_t> For(const ChunkKey& key, int64_t step) const;

 private:
  struct Pulled {
    int64_t step = -1;
    int64_t version = -1;
  };
  // The two newest pulls of each key by step, newest first: the step's own
  // and the next step's, which may arrive before this step's last push.
  using Newest = std::array<Pulled, 2>;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ChunkKey, Newest> pulled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PULLED_VERSIONS_H_
