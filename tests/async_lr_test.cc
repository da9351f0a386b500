// The learning rate of an async push (DESIGN.md "Consistency"): 1/N of a
// step by default, damped by staleness under --staleness_lr, and the
// schedule's steps counted in N pushes; over real gRPC on 127.0.0.1 with an
// in-process server.
#include <catch2/catch.hpp>

#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

TEST_CASE("async: a push is 1/N of a step: with N = 4 it applies lr/4", "[async][lr]") {
  TestCluster cluster(AsyncOptions(4));
  auto w = cluster.Worker(0);
  REQUIRE(w->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*w, 0, Filled(4)).ok());
  auto out = Zeros(SmallLayout());
  REQUIRE(PullAll(*w, 1, out).ok());
  REQUIRE(AllEqual(out, -1.0f));
}

TEST_CASE("async: --async_lr_scaling=none applies the whole lr to every push", "[async][lr]") {
  ServerOptions o = AsyncOptions(4);
  o.async_lr_scaling = AsyncLrScaling::kNone;
  o.staleness_lr = StalenessLr::kNone;
  TestCluster cluster(o);
  auto w = cluster.Worker(0);
  REQUIRE(w->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*w, 0, Filled(4)).ok());
  auto out = Zeros(SmallLayout());
  REQUIRE(PullAll(*w, 1, out).ok());
  REQUIRE(AllEqual(out, -4.0f));
}

TEST_CASE("async: a push with staleness 3 under --staleness_lr=inverse applies lr/4", "[async][lr]") {
  // lr / (1 + staleness) takes the place of lr / N: the same with 2 workers
  // as with --async_lr_scaling=none.
  ServerOptions o = AsyncOptions(2);
  o.staleness_lr = StalenessLr::kInverse;
  TestCluster cluster(o);
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto out = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 0, out).ok());  // a sees version 0
  for (int step = 0; step < 3; ++step) REQUIRE(PushAll(*b, step, Filled(1)).ok());  // versions 1, 2, 3
  REQUIRE(PushAll(*a, 0, Filled(4)).ok());  // 3 updates a did not see: lr / (1 + 3)
  REQUIRE(PullAll(*a, 1, out).ok());
  REQUIRE(AllEqual(out, -3.0f - 1.0f));
  const StalenessHistogram::Counts s = cluster.core(0)->Stats().staleness;
  const int64_t keys = cluster.core(0)->Stats().num_keys;
  REQUIRE(s.count == 4 * keys);  // every key's four pushes
  REQUIRE(s.sum == 3 * keys);
  REQUIRE(s.max == 3);
}

TEST_CASE("async: the schedule advances once per N pushes", "[async][lr]") {
  ServerOptions o = AsyncOptions(2);
  o.optimizer.schedule.kind = LrScheduleKind::kStep;
  o.optimizer.schedule.step_size = 1;
  o.optimizer.schedule.gamma = 0.5;
  TestCluster cluster(o);
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  for (int step = 0; step < 2; ++step) {
    REQUIRE(PushAll(*a, step, Filled(4)).ok());
    REQUIRE(PushAll(*b, step, Filled(4)).ok());
  }
  auto out = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 2, out).ok());
  REQUIRE(AllEqual(out, -(2.0f + 2.0f + 1.0f + 1.0f)));  // lr 1/2 twice, then 1/4 twice (each / 2)
}

}  // namespace
}  // namespace shardps::testing
