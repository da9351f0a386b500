#include "common/reconnect_args.h"

#include <algorithm>

#include <grpc/grpc.h>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status CheckPeerConnectTimeout(absl::Duration timeout) {
  if (timeout > absl::ZeroDuration() && timeout <= kMaxConnectTimeout) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--peer_connect_timeout is ", absl::FormatDuration(timeout),
                                                 "; want more than 0 and at most ",
                                                 absl::FormatDuration(kMaxConnectTimeout)));
}

absl::Duration LongerConnectTimeout(absl::Duration timeout) { return std::min(2 * timeout, kMaxConnectTimeout); }

std::vector<std::pair<std::string, int>> ReconnectArgs(absl::Duration connect_timeout) {
  return {
      {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
      {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250},
      {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(connect_timeout))},
  };
}

}  // namespace shardps
