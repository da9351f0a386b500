#include "client/pending_call.h"

#include <utility>

namespace shardps {

PsClient::Done PendingCall::Callback() {
  return [this](absl::Status s) {
    status = std::move(s);
    done.Notify();
  };
}

std::shared_ptr<PendingCall> PushThenPullAhead(PsClient& client, Mode mode, int64_t step, std::vector<TensorIn> grads,
                                               std::vector<TensorOut> weights,
                                               std::shared_ptr<PendingCall> pull_ahead) {
  auto push = std::make_shared<PendingCall>();
  if (mode == Mode::kSync && pull_ahead) {
    client.PushAsync(step, std::move(grads), push->Callback());
    client.PullAsync(step + 1, std::move(weights), pull_ahead->Callback());
    return push;
  }
  client.PushAsync(step, std::move(grads),
                   [&client, step, weights = std::move(weights), push, pull_ahead](absl::Status s) mutable {
                     if (pull_ahead && s.ok()) {
                       client.PullAsync(step + 1, std::move(weights), pull_ahead->Callback());
                     } else if (pull_ahead) {
                       pull_ahead->Callback()(s);
                     }
                     push->Callback()(std::move(s));
                   });
  return push;
}

}  // namespace shardps

namespace shardps {

void WaitAndKeepError(std::shared_ptr<PendingCall>& call, absl::Status& failure) {
  if (!call) return;
  call->done.WaitForNotification();
  if (!call->status.ok() && (failure.ok() || (IsRejoin(call->status) && !IsRejoin(failure)))) failure = call->status;
  call.reset();
}

}  // namespace shardps
