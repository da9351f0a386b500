// The state of one key (chunk) on its server: weights, optimizer slots,
// version, and the sync-mode gradient buffer. Each key has its own lock.
//
// Weights are copy-on-write: a pull takes a reference to the current buffer
// (no copy) and sends it; an update that finds the buffer still referenced
// by a pull in flight writes the new weights into a second buffer instead
// (UpdateWeights), so the update costs no extra pass over the weights.
#ifndef SHARDPS_SERVER_KEY_STATE_H_
#define SHARDPS_SERVER_KEY_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/key_partition.h"

namespace shardps {

struct KeyState {
  KeyState(const ChunkInfo& chunk, size_t index_on_server, int num_slots, int num_workers)
      : info(chunk),
        index(index_on_server),
        weights(std::make_shared<std::vector<float>>(chunk.length)),
        slots(num_slots, std::vector<float>(chunk.length)),
        last_pushed_step(num_workers, -1),
        last_pulled_version(num_workers, -1),
        replicated_pushed_step(num_workers, -1) {}
  KeyState(const KeyState&) = delete;
  KeyState& operator=(const KeyState&) = delete;

  // Constant after construction.
  const ChunkInfo info;
  const size_t index;  // among the keys of its server, in key order.

  absl::Mutex mu;
  std::shared_ptr<std::vector<float>> weights ABSL_GUARDED_BY(mu);
  // The previous weights after an out-of-place update; null before one.
  std::shared_ptr<std::vector<float>> spare ABSL_GUARDED_BY(mu);
  // Runs write(from, to), which must set to[i] from from[i] for every i of
  // the key: in place (from == to) when no pull holds the weights, else from
  // the held buffer into a spare one that becomes the weights (the pull
  // keeps the old one, which is the spare for a later update once released).
  template <typename Write>
  void UpdateWeights(Write write) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // Only pulls copy the pointer, under mu, so a count of 1 cannot grow here.
    if (weights.use_count() == 1) return write(static_cast<const float*>(weights->data()), weights->data());
    if (spare == nullptr || spare.use_count() > 1) spare = std::make_shared<std::vector<float>>(info.length);
    write(static_cast<const float*>(weights->data()), spare->data());
    weights.swap(spare);
  }
  std::vector<std::vector<float>> slots ABSL_GUARDED_BY(mu);
  // Optimizer steps applied. Written under mu; read without it by waiters.
  std::atomic<int64_t> version{0};
  // Replication: the version the next copy has acknowledged (pulls of a
  // later version wait for it while that copy lives).
  std::atomic<int64_t> replicated_version{0};
  // The weights of that version: what pulls read while the next copy lives
  // and has not acknowledged a later one. With replicas it is never null
  // once the key has weights (Init, a restore and an install keep theirs
  // here: ParameterServerImpl::PinAcknowledged); without, always null.
  std::shared_ptr<const std::vector<float>> replicated_weights ABSL_GUARDED_BY(mu);
  // Per worker rank: the last step it pushed for this key; -1 before any.
  std::vector<int64_t> last_pushed_step ABSL_GUARDED_BY(mu);
  // Per worker rank: the version it last pulled of this key; -1 before any
  // (async and ssp: a push's staleness is version - this).
  std::vector<int64_t> last_pulled_version ABSL_GUARDED_BY(mu);
  // Replication, per worker rank: the last step of its pushes that the next
  // copy has acknowledged; -1 before any (an async or ssp push's answer
  // waits for it: server/parameter_server_acks.cc).
  std::vector<int64_t> replicated_pushed_step ABSL_GUARDED_BY(mu);

  // Sync mode: sum of the gradients pushed for step `version`, and who
  // pushed them. Empty until the first buffered push. The sum adds ranks in
  // increasing order whatever order they arrive in (a run is bitwise
  // reproducible): ranks below `next_rank` are in it; a rank that arrives
  // before a lower one waits in `held` (null otherwise). The first rank in
  // the sum overwrites it, so nothing zeroes it between steps: its values
  // are stale until then (server/sync_aggregator.cc).
  std::vector<float> grad_sum ABSL_GUARDED_BY(mu);
  std::vector<bool> contributed ABSL_GUARDED_BY(mu);
  int contributors ABSL_GUARDED_BY(mu) = 0;
  int next_rank ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::unique_ptr<float[]>> held ABSL_GUARDED_BY(mu);
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_KEY_STATE_H_
