#include "client/pending_call.h"

#include <utility>

namespace shardps {

PsClient::Done PendingCall::Callback() {
  return [this](absl::Status s) {
    status = std::move(s);
    done.Notify();
  };
}

std::shared_ptr<PendingCall> PushThenPullAhead(PsClient& client, int64_t step, std::vector<TensorIn> grads,
                                               std::vector<TensorOut> weights,
                                               std::shared_ptr<PendingCall> pull_ahead) {
  auto push = std::make_shared<PendingCall>();
  if (!pull_ahead) {
    client.PushAsync(step, std::move(grads), push->Callback());
    return push;
  }
  client.PushThenPull(step, std::move(grads), std::move(weights), push->Callback(), pull_ahead->Callback());
  return push;
}

}  // namespace shardps

namespace shardps {

void WaitAndKeepError(std::shared_ptr<PendingCall>& call, absl::Status& failure) {
  if (!call) return;
  call->done.WaitForNotification();
  KeepFirstError(failure, call->status);
  call.reset();
}

}  // namespace shardps
