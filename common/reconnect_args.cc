#include "common/reconnect_args.h"

#include <algorithm>

#include <grpc/grpc.h>

namespace shardps {

absl::Duration LongerConnectTimeout(absl::Duration timeout) { return std::min(2 * timeout, kMaxConnectTimeout); }

std::vector<std::pair<std::string, int>> ReconnectArgs(absl::Duration connect_timeout) {
  return {
      {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
      {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250},
      {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(connect_timeout))},
  };
}

}  // namespace shardps
