// Sync mode (BSP) on one server: gradients pushed for a key's current step
// are summed; once every worker that the step requires has pushed, the sum
// is averaged and applied as one optimizer step (DESIGN.md, "sync").
//
// Holds no key state of its own: it works on the KeyState it is given,
// whose lock the caller holds. Thread-safe otherwise.
#ifndef SHARDPS_SERVER_SYNC_AGGREGATOR_H_
#define SHARDPS_SERVER_SYNC_AGGREGATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "proto/shardps.pb.h"
#include "server/key_state.h"
#include "server/membership.h"
#include "server/payload_blocks.h"

namespace shardps {

class SyncAggregator {
 public:
  // Applies the mean gradient to the key as one optimizer step.
  using Apply = std::function<void(KeyState& k, const float* mean)>;

  // `membership` must outlive the aggregator.
  SyncAggregator(int num_workers, Membership* membership, Apply apply)
      : num_workers_(num_workers), membership_(membership), apply_(std::move(apply)) {}

  // Adds `rank`'s gradient for `step`: PUSH_DUPLICATE when it already
  // pushed this step or a later one, PUSH_APPLIED when it completed the step, else
  // PUSH_BUFFERED. FAILED_PRECONDITION naming both steps when the key is at
  // another step. REQUIRES: k.mu held.
  absl::StatusOr<wire::PushOutcome> Add(KeyState& k, int rank, int64_t step, const ChunkPayload& grad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);

  // OK when a push of `step` by `rank` could be added now. REQUIRES: k.mu held.
  static absl::Status CheckStep(const KeyState& k, int rank, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);

  // Applies the key's step when every required worker has pushed (after a
  // worker was declared dead or registered at a later step); true if it did.
  // REQUIRES: k.mu held.
  bool CompleteIfReady(KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);

  // Key steps completed without every worker of the job.
  int64_t steps_completed_short() const { return steps_completed_short_; }

 private:
  const int num_workers_;
  Membership* const membership_;
  const Apply apply_;
  std::atomic<int64_t> steps_completed_short_{0};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SYNC_AGGREGATOR_H_
