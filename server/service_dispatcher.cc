#include "server/service_dispatcher.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/rpc_metadata.h"
#include "common/security.h"
#include "common/tensor_frame.h"
#include "server/ps_service.h"
#include "server/raw_tensor_service.h"
#include "server/view_metadata.h"

namespace shardps {
namespace {

// Answers a call at once with `status`, and the incarnation.
class RefusingReactor final : public grpc::ServerGenericBidiReactor {
 public:
  RefusingReactor(grpc::GenericCallbackServerContext* ctx, uint64_t incarnation, const absl::Status& status) {
    ctx->AddTrailingMetadata(kIncarnationKey, IncarnationText(incarnation));
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

bool ServiceDispatcher::Admitted(grpc::GenericCallbackServerContext* ctx) const {
  if (auth_token_.empty()) return true;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  return it != metadata.end() &&
         TokenMatches(absl::string_view(it->second.data(), it->second.size()), auth_token_);
}

grpc::ServerGenericBidiReactor* ServiceDispatcher::CreateReactor(grpc::GenericCallbackServerContext* ctx) {
  if (!Admitted(ctx)) {
    const absl::Status refused = core_->RecordRefused(absl::UnauthenticatedError(absl::StrCat(
        ctx->method(), " from ", ctx->peer(), " refused: it does not carry the job token (--auth_token_file)")));
    return new RefusingReactor(ctx, core_->incarnation(), refused);
  }
  // A primary's Replicate calls too: the pulls of the step wait for their
  // answers, which must not queue behind this server's bulk answers.
  if (lifted_ != nullptr && (ctx->method() == kRawPushMethod || ctx->method() == kRawReplicateMethod)) {
    lifted_->Mark(ctx->peer());
  }
  // Replication: the servers the caller knows to have failed, joined or moved.
  NoteViewMetadata(ctx->client_metadata(), *core_);
  if (grpc::ServerGenericBidiReactor* r = NewParameterServiceReactor(ctx, core_, stop_)) return r;
  if (grpc::ServerGenericBidiReactor* r = NewRawTensorReactor(ctx, core_, trace_, lifted_.get())) return r;
  return new RefusingReactor(ctx, core_->incarnation(),
                             absl::UnimplementedError(absl::StrCat("unknown method ", ctx->method())));
}

}  // namespace shardps
