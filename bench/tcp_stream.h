// The baseline the wire benchmarks are measured against: one TCP stream on
// 127.0.0.1 between two threads of this process, buffers reused.
#ifndef SHARDPS_BENCH_TCP_STREAM_H_
#define SHARDPS_BENCH_TCP_STREAM_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace shardps {

// Bytes per second one loopback TCP stream carries, sending `total_bytes`
// in 1 MiB writes.
absl::StatusOr<double> LoopbackTcpBytesPerSecond(int64_t total_bytes);

}  // namespace shardps

#endif  // SHARDPS_BENCH_TCP_STREAM_H_
