#include "common/reconnect_args.h"

#include <grpc/grpc.h>

namespace shardps {

std::vector<std::pair<std::string, int>> ReconnectArgs() {
  return {
      {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
      {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250},
      {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(kConnectTimeout))},
  };
}

}  // namespace shardps
