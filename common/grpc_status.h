// The one place where absl::Status and grpc::Status are converted.
#ifndef SHARDPS_COMMON_GRPC_STATUS_H_
#define SHARDPS_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace shardps {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// True when a failed call says the peer's process is gone: its connection
// was refused, reset or closed (kill -9, a crash). Not for a connection that
// could not be set up in time (a handshake that timed out under load), nor
// for a call that went unanswered: those are silence, which a caller
// judges over a timeout instead.
bool PeerProcessGone(const absl::Status& status);

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_STATUS_H_
