// ParameterService's methods of sparse rows, PushRows and PullRows, without
// copies of the rows through protobuf strings (common/proto_bytes.h): a
// push's rows are read from the received slices straight into the vector
// the store then keeps, and a pull's answer points gRPC at the rows read.
#ifndef SHARDPS_SERVER_ROWS_SERVICE_H_
#define SHARDPS_SERVER_ROWS_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/server_callback.h>

#include "absl/strings/string_view.h"
#include "server/parameter_server.h"

namespace shardps {

// A started reactor for method `name` ("PushRows" or "PullRows"), else
// nullptr.
grpc::ServerGenericBidiReactor* NewRowsReactor(absl::string_view name, grpc::GenericCallbackServerContext* ctx,
                                               ParameterServer* core);

}  // namespace shardps

#endif  // SHARDPS_SERVER_ROWS_SERVICE_H_
