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
