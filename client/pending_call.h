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
// `pull_ahead`, the pull of `weights` for step + 1 completes into it
// (PsClient::PushThenPull), so weights travel while the caller computes the
// rest of the step.
std::shared_ptr<PendingCall> PushThenPullAhead(PsClient& client, int64_t step, std::vector<TensorIn> grads,
                                               std::vector<TensorOut> weights,
                                               std::shared_ptr<PendingCall> pull_ahead);

// Waits for `call` (if any) and resets it; keeps its error in `failure`
// unless `failure` holds one already (a rejoin status wins over others).
void WaitAndKeepError(std::shared_ptr<PendingCall>& call, absl::Status& failure);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PENDING_CALL_H_
