// gRPC channel arguments for moving large tensors, used by both ends: big
// HTTP/2 frames and TCP reads (fewer, larger slices to parse), and a large
// flow-control window so that a multi-megabyte message is never stalled
// waiting for window updates.
#ifndef SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_
#define SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_

#include <string>
#include <utility>
#include <vector>

namespace shardps {

std::vector<std::pair<std::string, int>> BulkChannelArgs();

}  // namespace shardps

#endif  // SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_
