// server/worker_clocks.h: a worker's clock moves when it has pushed every key
// of a step, and a worker that never does is not counted without bound.
#include <catch2/catch.hpp>

#include "server/worker_clocks.h"

namespace shardps {
namespace {

TEST_CASE("a worker's clock moves when it has pushed every key of a step, steps interleaved", "[clocks]") {
  ManualClock clock;
  Membership membership(2, absl::Seconds(10), absl::Seconds(1), &clock);
  WorkerClocks clocks(2, &membership);
  clocks.NotePushed(0, 0, 2);
  clocks.NotePushed(0, 1, 2);  // pulled ahead: step 1 begins before step 0 ends
  REQUIRE(membership.ClockOf(0) == 0);
  clocks.NotePushed(0, 0, 2);
  REQUIRE(membership.ClockOf(0) == 1);
  clocks.NotePushed(0, 1, 2);
  REQUIRE(membership.ClockOf(0) == 2);
  REQUIRE(clocks.OpenSteps(0) == 0);
  REQUIRE(membership.ClockOf(1) == 0);
}

TEST_CASE("a worker that pushes only some keys keeps a bounded count", "[clocks]") {
  ManualClock clock;
  Membership membership(1, absl::Seconds(10), absl::Seconds(1), &clock);
  WorkerClocks clocks(1, &membership);
  for (int64_t step = 0; step < 100000; ++step) clocks.NotePushed(0, step, 2);
  REQUIRE(clocks.OpenSteps(0) <= 64);
  REQUIRE(membership.ClockOf(0) == 0);
  clocks.NotePushed(0, 99999, 2);  // the newest step completes
  REQUIRE(membership.ClockOf(0) == 100000);
}

}  // namespace
}  // namespace shardps
