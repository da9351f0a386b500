// The error of a gRPC server that could not listen: gRPC only logs why, so
// this asks the OS itself by trying the bind.
#ifndef SHARDPS_COMMON_LISTEN_ERROR_H_
#define SHARDPS_COMMON_LISTEN_ERROR_H_

#include <string>

#include "absl/status/status.h"

namespace shardps {

// UNAVAILABLE naming `address`, `port` and the OS's reason they cannot be
// bound (in use, not permitted, not an IPv4 address).
absl::Status CannotListen(const std::string& address, int port);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LISTEN_ERROR_H_
