// The async and ssp update rules against staleness (server/optimizer.h,
// server/server_options.h), over real gRPC on 127.0.0.1 with in-process
// servers: pushes name the version they were computed from, the servers
// count staleness from it, and the learning rate and the served weights
// follow the rule exactly (small integers and halves, compared with ==).
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "client/pending_call.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// An async job of one server and `workers` workers, lr 1, plain SGD.
ServerOptions AsyncOptions(int workers) {
  ServerOptions o = SyncOptions(1, workers);
  o.job.mode = Mode::kAsync;
  return o;
}

int64_t Keys(TestCluster& cluster) { return cluster.core(0)->Stats().num_keys; }

TEST_CASE("a push names the version its step's pull answered, though a later pull came between",
          "[async][staleness]") {
  TestCluster cluster(AsyncOptions(2));
  auto a = cluster.Worker(0), b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 0, w).ok());                                     // a computes step 0 on version 0
  for (int s = 0; s < 2; ++s) REQUIRE(PushAll(*b, s, Filled(2)).ok());  // versions 1, 2
  REQUIRE(PullAll(*a, 1, w).ok());  // a prefetches step 1's weights: version 2
  REQUIRE(PushAll(*a, 0, Filled(2)).ok());
  // Counted from version 0 (staleness 2), not from a's last pull (0).
  const StalenessHistogram::Counts s = cluster.core(0)->Stats().staleness;
  REQUIRE(s.count == 3 * Keys(cluster));
  REQUIRE(s.sum == 2 * Keys(cluster));
  REQUIRE(s.max == 2);
}

TEST_CASE("staleness is counted per tensor", "[async][staleness]") {
  TestCluster cluster(AsyncOptions(2));
  auto a = cluster.Worker(0), b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 0, w).ok());
  REQUIRE(b->Push(0, {{1, Filled(1)[1].data()}}).ok());  // only tensor "b" moves on
  REQUIRE(PushAll(*a, 0, Filled(1)).ok());
  const auto by_tensor = cluster.core(0)->Stats().staleness_by_tensor;
  REQUIRE(by_tensor.size() == 2);
  REQUIRE(by_tensor[0].first == "w");
  REQUIRE(by_tensor[0].second.sum == 0);  // a's push of "w" saw every update of it
  REQUIRE(by_tensor[1].first == "b");
  REQUIRE(by_tensor[1].second.max == 1);  // a's push of "b" missed b's
  REQUIRE(by_tensor[1].second.count == 2 * (5 / 4 + 1));  // 2 pushes of its 2 chunks
}

TEST_CASE("--staleness_lr=capped damps only pushes staler than a round of the others", "[async][lr]") {
  ServerOptions o = AsyncOptions(2);  // a push is lr / 2
  o.staleness_lr = StalenessLr::kCapped;
  TestCluster cluster(o);
  auto a = cluster.Worker(0), b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 0, w).ok());  // a computes on version 0
  for (int s = 0; s < 3; ++s) {
    REQUIRE(PullAll(*b, s, w).ok());
    REQUIRE(PushAll(*b, s, Filled(4)).ok());  // staleness 0: min(1, 2 / 1) = 1, so -2 each
  }
  REQUIRE(PushAll(*a, 0, Filled(4)).ok());  // staleness 3: min(1, 2 / 4) = 1/2, so -1
  REQUIRE(PullAll(*a, 1, w).ok());
  REQUIRE(AllEqual(w, -6.0f - 1.0f));
}

// Momentum 0.5 per update (async_lr_scaling=none: a push is a step), lead
// L = 2 updates: s = 0.75, and the served weights are u = w - 0.75 v.
TEST_CASE("momentum lookahead: the served weights lead plain momentum's by lr * s * v", "[async][lookahead]") {
  ServerOptions o = AsyncOptions(2);
  o.async_lr_scaling = AsyncLrScaling::kNone;
  o.optimizer.momentum = 0.5;
  SECTION("lookahead 2") {
    o.momentum_lookahead = 2;
    TestCluster cluster(o);
    auto a = cluster.Worker(0), b = cluster.Worker(1);
    REQUIRE(a->Init(Zeros(SmallLayout())).ok());
    REQUIRE(PushAll(*a, 0, Filled(2)).ok());  // v = 2, w = -2
    REQUIRE(PushAll(*b, 0, Filled(2)).ok());  // v = 3, w = -5
    auto u = Zeros(SmallLayout());
    REQUIRE(PullAll(*a, 1, u).ok());
    REQUIRE(AllEqual(u, -5.0f - 0.75f * 3));
    REQUIRE(PushAll(*a, 1, Filled(0)).ok());  // v = 1.5, w = -6.5
    REQUIRE(PullAll(*b, 1, u).ok());
    REQUIRE(AllEqual(u, -6.5f - 0.75f * 1.5f));
  }
  SECTION("none: plain momentum") {
    o.momentum_lookahead = 0;
    TestCluster cluster(o);
    auto a = cluster.Worker(0), b = cluster.Worker(1);
    REQUIRE(a->Init(Zeros(SmallLayout())).ok());
    REQUIRE(PushAll(*a, 0, Filled(2)).ok());
    REQUIRE(PushAll(*b, 0, Filled(2)).ok());
    auto w = Zeros(SmallLayout());
    REQUIRE(PullAll(*a, 1, w).ok());
    REQUIRE(AllEqual(w, -5.0f));
  }
}

TEST_CASE("the lookahead's default: 2 updates per other worker in async and ssp, none in sync",
          "[lookahead]") {
  ServerOptions o = AsyncOptions(8);
  o.optimizer.momentum = 0.9;
  REQUIRE(LookaheadUpdates(o) == kLookaheadPerOtherWorker * 7);
  o.job.mode = Mode::kSsp;
  REQUIRE(LookaheadUpdates(o) == kLookaheadPerOtherWorker * 7);
  o.job.mode = Mode::kSync;
  REQUIRE(LookaheadUpdates(o) == 0);
  o.job.mode = Mode::kAsync;
  o.optimizer.nesterov = true;
  REQUIRE(LookaheadUpdates(o) == 0);
  o.optimizer.nesterov = false;
  o.optimizer.momentum = 0;
  REQUIRE(LookaheadUpdates(o) == 0);
  o.momentum_lookahead = 3;  // set: taken as it is
  REQUIRE(LookaheadUpdates(o) == 3);
}

TEST_CASE("--async_lr_scaling=auto: a whole step a push for AdaGrad, 1/N of one for the others", "[async][lr]") {
  ServerOptions o = AsyncOptions(4);
  o.async_lr_scaling = AsyncLrScaling::kAuto;
  o.optimizer.kind = OptimizerKind::kAdaGrad;
  CHECK(PushesPerStep(o) == 1);
  o.optimizer.kind = OptimizerKind::kSgd;
  CHECK(PushesPerStep(o) == 4);
  o.optimizer.kind = OptimizerKind::kAdam;
  CHECK(PushesPerStep(o) == 4);
  o.async_lr_scaling = AsyncLrScaling::kNone;  // set: taken as it is
  CHECK(PushesPerStep(o) == 1);
  o.async_lr_scaling = AsyncLrScaling::kWorkers;
  o.optimizer.kind = OptimizerKind::kAdaGrad;
  CHECK(PushesPerStep(o) == 4);
  o.job.mode = Mode::kSync;
  CHECK(PushesPerStep(o) == 1);
  CHECK(*ParseAsyncLrScaling("auto") == AsyncLrScaling::kAuto);
  CHECK(ParseAsyncLrScaling("half").status().message() == "unknown --async_lr_scaling 'half'; want auto, workers or none");
}

TEST_CASE("a sync job with a lookahead, or a bad one, does not start", "[lookahead]") {
  ServerOptions o = SyncOptions(1, 2);
  o.optimizer.momentum = 0.9;
  o.momentum_lookahead = 4;
  RealClock clock;
  auto sync = ParameterServer::Create(o, &clock);
  REQUIRE(sync.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(sync.status().message().find("sync") != std::string_view::npos);
  REQUIRE(!ParseMomentumLookahead("-2").ok());
  REQUIRE(!ParseMomentumLookahead("soon").ok());
  REQUIRE(*ParseMomentumLookahead("none") == 0);
  REQUIRE(*ParseMomentumLookahead("auto") == kAutoLookahead);
}

}  // namespace
}  // namespace shardps::testing
