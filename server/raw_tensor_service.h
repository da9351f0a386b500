// The raw framing of Push, Pull and Replicate (proto/shardps.proto, "The raw
// framing"): requests' payloads are read straight from the received slices
// (a replica's copied once, into the buffers the backup installs) and pulled
// weights are sent as slices that own the core's snapshot, so no payload
// passes through a protobuf bytes field.
#ifndef SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_
#define SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/server_callback.h>

#include "common/connection_priority.h"
#include "common/trace.h"
#include "server/parameter_server.h"

namespace shardps {

// A started reactor for `ctx->method()` when it is a raw-framing method,
// else nullptr. `core` must outlive the call.
// `trace` (may be null) records each push's arrival and each pull's wait and
// answer. `lifted` (may be null) is given the connection of each pull that
// names itself a first-weights call (PullRequest.first_weights).
grpc::ServerGenericBidiReactor* NewRawTensorReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core,
                                                    Trace* trace = nullptr, ConnectionPriorityMarker* lifted = nullptr);

}  // namespace shardps

#endif  // SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_
