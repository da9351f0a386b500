#include "common/reconnect_args.h"

#include <grpc/grpc.h>

#include <algorithm>

namespace shardps {

std::vector<std::pair<std::string, int>> ReconnectArgs(absl::Duration first_retry) {
  const int first_ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(first_retry), 1, 250));
  return {
      {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, first_ms},
      {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250},
      {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(kConnectTimeout))},
  };
}

}  // namespace shardps
