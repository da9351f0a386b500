// The gRPC face of a ParameterServer: the methods of ParameterService
// (proto/shardps.proto) served through gRPC's generic callback API, so that
// a request whose bytes do not parse as its message is answered
// INVALID_ARGUMENT naming the message (gRPC's generated service would
// answer it with an empty UNIMPLEMENTED). Each handler unpacks the proto,
// calls the core, and packs the answer; absl::Status becomes grpc::Status
// in one place (common/grpc_status.h).
#ifndef SHARDPS_SERVER_PS_SERVICE_H_
#define SHARDPS_SERVER_PS_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/server_callback.h>

#include <functional>

#include "server/parameter_server.h"

namespace shardps {

// A started reactor for `ctx->method()` when it is a ParameterService
// method, else nullptr. `core` must outlive the call. `stop` (may be empty:
// ADMIN_STOP is then refused) asks the process to stop as SIGTERM would.
grpc::ServerGenericBidiReactor* NewParameterServiceReactor(grpc::GenericCallbackServerContext* ctx,
                                                           ParameterServer* core, const std::function<void()>& stop);

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVICE_H_
