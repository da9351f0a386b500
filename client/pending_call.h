// Waiting for the PsClient's asynchronous calls, and the push that pulls its
// tensors ahead for the next step. Shared by the trainer and the emulated
// worker, which drive steps the same way.
#ifndef SHARDPS_CLIENT_PENDING_CALL_H_
#define SHARDPS_CLIENT_PENDING_CALL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/ps_client.h"

namespace shardps {

// The completion of one asynchronous push or pull: wait on `done`, then
// read `status`.
struct PendingCall {
  absl::Notification done;
  absl::Status status;
  PsClient::Done Callback();
};

// Pushes `grads` for `step` and returns the push's completion. With
// `pull_ahead`, the pull of `weights` for step + 1 leaves into it, so
// weights travel while the caller computes the rest of the step: in sync
// mode at once, beside the push (the pull waits for the step's version,
// which needs this push, anyway); in async and ssp once the push is
// acknowledged, so the weights hold this worker's own gradient (on a failed
// push the pull gets the push's error).
std::shared_ptr<PendingCall> PushThenPullAhead(PsClient& client, Mode mode, int64_t step, std::vector<TensorIn> grads,
                                               std::vector<TensorOut> weights,
                                               std::shared_ptr<PendingCall> pull_ahead);

// Waits for `call` (if any) and resets it; keeps its error in `failure`
// unless `failure` holds one already (a rejoin status wins over others).
void WaitAndKeepError(std::shared_ptr<PendingCall>& call, absl::Status& failure);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PENDING_CALL_H_
