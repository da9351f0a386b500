// gRPC channel arguments for moving large tensors, used by both ends: big
// HTTP/2 frames and TCP reads (fewer, larger slices to parse), and a large
// flow-control window so that a multi-megabyte message is never stalled
// waiting for window updates.
//
// `bdp_probe`: gRPC's bandwidth-delay probing, a PING each time a burst of
// data arrives, to grow the window. It raises one connection's bulk rate
// (bench/push_pull at 16 MB: 4.7 GB/s with it, 3.4 without) and costs two
// wake-ups a burst on every connection: with 32 servers a third of a
// worker's wake-ups and a sixth of its CPU a step (docs/performance.md,
// "Cost per step as N grows").
#ifndef SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_
#define SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_

#include <string>
#include <utility>
#include <vector>

namespace shardps {

std::vector<std::pair<std::string, int>> BulkChannelArgs(bool bdp_probe = true);

}  // namespace shardps

#endif  // SHARDPS_COMMON_BULK_CHANNEL_ARGS_H_
