#include "server/service_dispatcher.h"

#include "absl/strings/str_cat.h"
#include "common/rpc_metadata.h"
#include "server/ps_service.h"
#include "server/raw_tensor_service.h"

namespace shardps {
namespace {

class UnknownMethodReactor final : public grpc::ServerGenericBidiReactor {
 public:
  UnknownMethodReactor(grpc::GenericCallbackServerContext* ctx, uint64_t incarnation) {
    ctx->AddTrailingMetadata(kIncarnationKey, IncarnationText(incarnation));
    Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, absl::StrCat("unknown method ", ctx->method())));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerGenericBidiReactor* ServiceDispatcher::CreateReactor(grpc::GenericCallbackServerContext* ctx) {
  if (grpc::ServerGenericBidiReactor* r = NewParameterServiceReactor(ctx, core_)) return r;
  if (grpc::ServerGenericBidiReactor* r = NewRawTensorReactor(ctx, core_)) return r;
  return new UnknownMethodReactor(ctx, core_->incarnation());
}

}  // namespace shardps
