// The baselines the wire benchmarks are measured against, in the same run
// (this machine is shared, and its speed changes from day to day), buffers
// reused: one memcpy; one TCP stream on 127.0.0.1; and a bare-socket
// push+pull on 127.0.0.1 (what the kernel's copies alone allow for the same
// round trip, with no framing, no apply and no copy into a tensor).
#ifndef SHARDPS_BENCH_BASELINES_H_
#define SHARDPS_BENCH_BASELINES_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace shardps {

// Bytes per second one memcpy of `bytes` moves on one thread (median of 9).
double MemcpyBytesPerSecond(int64_t bytes);

// Bytes per second one loopback TCP stream carries, sending `total_bytes`
// in 1 MiB writes.
absl::StatusOr<double> LoopbackTcpBytesPerSecond(int64_t total_bytes);

// Median seconds per round of a bare-socket push+pull over `connections`
// TCP connections: each round, every connection sends `bytes / connections`
// bytes and its peer, once it has read them all, sends as many back.
absl::StatusOr<double> LoopbackPushPullSeconds(int64_t bytes, int connections, int repeats);

}  // namespace shardps

#endif  // SHARDPS_BENCH_BASELINES_H_
