// The benchmarks' same-run baselines measure what they say: the bare-socket
// push+pull really moves its bytes both ways, and bad arguments are refused.
#include "bench/baselines.h"

#include <catch2/catch.hpp>

namespace shardps::testing {
namespace {

TEST_CASE("the bare-socket push+pull baseline times whole round trips", "[bench]") {
  // 4 MB each way over 2 connections, median of 3 rounds.
  absl::StatusOr<double> seconds = LoopbackPushPullSeconds(4 << 20, 2, 3);
  REQUIRE(seconds.ok());
  CHECK(*seconds > 0);
  CHECK(*seconds < 5);
  // 16 times the bytes take longer (a round that skipped reading or
  // answering would not); the margin is wide, as the machine is noisy.
  absl::StatusOr<double> more = LoopbackPushPullSeconds(64 << 20, 2, 5);
  REQUIRE(more.ok());
  CHECK(*more > *seconds);
}

TEST_CASE("the bare-socket baseline refuses bad arguments", "[bench]") {
  CHECK(absl::IsInvalidArgument(LoopbackPushPullSeconds(1 << 20, 0, 3).status()));
  CHECK(absl::IsInvalidArgument(LoopbackPushPullSeconds(1 << 20, 2, 0).status()));
  CHECK(absl::IsInvalidArgument(LoopbackPushPullSeconds(1, 2, 3).status()));
}

TEST_CASE("the memcpy baseline is a positive rate", "[bench]") {
  CHECK(MemcpyBytesPerSecond(1 << 20) > 0);
}

}  // namespace
}  // namespace shardps::testing
