// Pulls ahead (DESIGN.md "Consistency"): a worker's pull for the next step,
// sent with its push, and async_prefetch's pull of the next step's weights,
// in async and ssp, and after a rewind; over real gRPC on 127.0.0.1 with
// in-process servers.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "client/pending_call.h"
#include "tests/checkpoints_on_demand.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// One backward pass of SmallLayout() as trainers run it: tensor 1's push,
// then tensor 0's, each with its pull for step + 1 into `next`; waits for all.
absl::Status BackwardWithPullAhead(PsClient& c, int64_t step, std::vector<std::vector<float>>& next,
                                   float gradient = 1) {
  const auto g = Filled(gradient);
  auto pull1 = std::make_shared<PendingCall>(), pull0 = std::make_shared<PendingCall>();
  auto push1 = PushThenPullAhead(c, step, {{1, g[1].data()}}, {{1, next[1].data()}}, pull1);
  auto push0 = PushThenPullAhead(c, step, {{0, g[0].data()}}, {{0, next[0].data()}}, pull0);
  absl::Status failure;
  for (auto* p : {&push1, &push0, &pull1, &pull0}) WaitAndKeepError(*p, failure);
  return failure;
}

// A registered worker `rank` of `cluster` with async_prefetch.
std::unique_ptr<PsClient> PrefetchingWorker(const TestCluster& cluster, int rank) {
  ClientOptions options = cluster.ClientFor(rank);
  options.async_prefetch = true;
  return cluster.Worker(options);
}

// Every value is a or b (each chunk is one version; chunks may differ).
bool TensorIsOneOf(const std::vector<float>& t, float a, float b) {
  for (float x : t) {
    if (x != a && x != b) return false;
  }
  return true;
}

TEST_CASE("async: a pull ahead holds the worker's own push; with async_prefetch, every earlier step's", "[async]") {
  ServerOptions o = AsyncOptions(2);
  o.job.num_servers = 2;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
  o.staleness_lr = StalenessLr::kNone;         // and stale ones undamped
  TestCluster cluster(o);
  auto reads_own = cluster.Worker(0), fetches_early = PrefetchingWorker(cluster, 1);
  REQUIRE(reads_own->Init(Zeros(SmallLayout())).ok());
  auto next = Zeros(SmallLayout());
  REQUIRE(BackwardWithPullAhead(*reads_own, 0, next).ok());
  CHECK(AllEqual(next, -1.0f));  // fetched after its own push was acknowledged
  // Prefetching, the fetch for step 2 leaves as step 1's backward begins:
  // after every push so far was acknowledged, maybe before step 1's.
  REQUIRE(BackwardWithPullAhead(*fetches_early, 1, next).ok());
  CHECK(TensorIsOneOf(next[0], -1.0f, -2.0f));
  CHECK(TensorIsOneOf(next[1], -1.0f, -2.0f));
  REQUIRE(BackwardWithPullAhead(*fetches_early, 2, next).ok());
  CHECK(TensorIsOneOf(next[0], -2.0f, -3.0f));  // holds step 1's pushes at least
  CHECK(TensorIsOneOf(next[1], -2.0f, -3.0f));
  REQUIRE(PullAll(*fetches_early, 4, next).ok());
  CHECK(AllEqual(next, -3.0f));  // nothing lost
}

// With pull_with_push the pull leaves with the push (on another connection,
// so it often arrives first) and the server holds it until the push is
// applied: every pull ahead holds the worker's own push, exactly.
TEST_CASE("async: with pull_with_push a pull ahead holds the worker's own push too", "[async]") {
  ServerOptions o = AsyncOptions(1);
  o.job.num_servers = 2;
  o.async_lr_scaling = AsyncLrScaling::kNone;
  o.staleness_lr = StalenessLr::kNone;
  TestCluster cluster(o);
  ClientOptions options = cluster.ClientFor(0);
  options.pull_with_push = true;
  options.channels_per_server = 2;
  auto worker = cluster.Worker(options);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  auto next = Zeros(SmallLayout());
  int stale = 0;
  for (int64_t step = 0; step < 30; ++step) {
    REQUIRE(BackwardWithPullAhead(*worker, step, next).ok());
    if (!AllEqual(next, -static_cast<float>(step + 1))) ++stale;
  }
  CHECK(stale == 0);
}

// In ssp the prefetch is a pull for the next step like any other: it waits
// for the staleness bound, so the bound holds; only the worker's own pushes
// of the step may be missing.
TEST_CASE("ssp with async_prefetch: the prefetch waits for the staleness bound", "[ssp]") {
  ServerOptions o = SyncOptions(2, 2);
  o.job.mode = Mode::kSsp;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
  o.staleness_lr = StalenessLr::kNone;         // and stale ones undamped
  SECTION("staleness 0: the prefetched weights hold every push of the step, its own too") {
    o.job.staleness = 0;
    TestCluster cluster(o);
    auto prefetching = PrefetchingWorker(cluster, 0);
    auto other = cluster.Worker(1);
    REQUIRE(prefetching->Init(Zeros(SmallLayout())).ok());
    REQUIRE(PushAll(*other, 0, Filled(1)).ok());
    auto next = Zeros(SmallLayout());
    REQUIRE(BackwardWithPullAhead(*prefetching, 0, next).ok());
    CHECK(AllEqual(next, -2.0f));  // the prefetch left first, and waited for its own push
  }
  SECTION("staleness 1: a worker a step ahead gets its prefetch once the other finishes a step") {
    o.job.staleness = 1;
    TestCluster cluster(o);
    auto prefetching = PrefetchingWorker(cluster, 0);
    auto other = cluster.Worker(1);
    REQUIRE(prefetching->Init(Zeros(SmallLayout())).ok());
    auto next = Zeros(SmallLayout());
    REQUIRE(BackwardWithPullAhead(*prefetching, 0, next).ok());  // for step 1: clock 0 is within the bound
    absl::Status ahead;
    absl::Notification done;
    std::thread step1([&] {
      ahead = BackwardWithPullAhead(*prefetching, 1, next);  // for step 2: needs the other's clock 1
      done.Notify();
    });
    // Each server holds the prefetch of every key it owns (a request a key).
    bool held = true;
    for (int s = 0; s < 2; ++s) held = held && AwaitWaitingPulls(cluster.core(s), cluster.core(s)->Stats().num_keys);
    const bool early = done.HasBeenNotified();
    REQUIRE(PushAll(*other, 0, Filled(1)).ok());
    step1.join();
    CHECK(held);
    CHECK_FALSE(early);
    REQUIRE(ahead.ok());
    CHECK(TensorIsOneOf(next[0], -2.0f, -3.0f));  // both step 0 pushes; its own step 1 push maybe
    CHECK(TensorIsOneOf(next[1], -2.0f, -3.0f));
  }
}

// A worker rewound to the step it was on prefetches that step's next
// weights again: what it staged before, values or a fetch's error, belongs
// to the timeline the rewind left.
TEST_CASE("ssp with async_prefetch: after a rewind to the same step the prefetch is fetched again", "[ssp]") {
  ServerOptions o = CrashingServers(Mode::kSsp, 2, 1, TempDir("prefetch-rewind"));
  o.job.staleness = 1;
  o.async_lr_scaling = AsyncLrScaling::kNone;
  o.staleness_lr = StalenessLr::kNone;
  CheckpointsOnDemand servers(o);
  TestCluster& cluster = servers.cluster;
  auto worker = PrefetchingWorker(cluster, 0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  auto next = Zeros(SmallLayout());
  for (int64_t step = 0; step < 4; ++step) REQUIRE(BackwardWithPullAhead(*worker, step, next).ok());
  REQUIRE(servers.Reach(2, 4));
  cluster.Restart(1);  // it restores step 4 and awaits a rewind

  // Step 4's backward begins the prefetch of step 5 and meets the restart.
  const absl::Status met = BackwardWithPullAhead(*worker, 4, next);
  INFO(met.ToString());
  REQUIRE(IsRejoin(met));
  absl::StatusOr<int64_t> resumed = worker->Register();
  REQUIRE(resumed.ok());
  REQUIRE(*resumed == 4);  // back to the step it was on
  const int64_t pulls_before = cluster.core(1)->Stats().pulls;
  const absl::Status replayed = BackwardWithPullAhead(*worker, 4, next, 10);
  INFO(replayed.ToString());
  REQUIRE(replayed.ok());
  CHECK(cluster.core(1)->Stats().pulls > pulls_before);  // fetched again from the restarted server
  CHECK(TensorIsOneOf(next[0], -4.0f, -14.0f));           // step 4's weights, its own push maybe
  CHECK(TensorIsOneOf(next[1], -4.0f, -14.0f));
  REQUIRE(PullAll(*worker, 5, next).ok());
  CHECK(AllEqual(next, -14.0f));  // the replayed push, once, on the rewound weights
}

}  // namespace
}  // namespace shardps::testing
