// The one place where absl::Status and grpc::Status are converted.
#ifndef SHARDPS_COMMON_GRPC_STATUS_H_
#define SHARDPS_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace shardps {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_STATUS_H_
