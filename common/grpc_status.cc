#include "common/grpc_status.h"

namespace shardps {

// absl::StatusCode and grpc::StatusCode share their numbering (both follow
// google.rpc.Code), so the conversion is a cast of the code plus the message.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace shardps
