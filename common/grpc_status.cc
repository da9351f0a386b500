#include "common/grpc_status.h"

#include "absl/strings/match.h"

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

bool PeerProcessGone(const absl::Status& status) {
  if (!absl::IsUnavailable(status)) return false;
  for (absl::string_view sign : {"Connection refused", "Connection reset", "Socket closed", "Broken pipe"}) {
    if (absl::StrContains(status.message(), sign)) return true;
  }
  return false;
}

}  // namespace shardps
