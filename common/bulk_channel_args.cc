#include "common/bulk_channel_args.h"

#include <grpc/grpc.h>

namespace shardps {

std::vector<std::pair<std::string, int>> BulkChannelArgs(bool bdp_probe) {
  std::vector<std::pair<std::string, int>> args = {
      {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1},  // HTTP/2's largest
      {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20},
      {GRPC_ARG_TCP_READ_CHUNK_SIZE, 1 << 20},
      {GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10},
      {GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 4 << 20},
  };
  if (!bdp_probe) args.emplace_back(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return args;
}

}  // namespace shardps
