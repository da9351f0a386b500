// Checkpoints by time in sync and ssp (server/shard_checkpointer.h, "By
// time"), in-process over real gRPC: servers whose timers run apart still
// checkpoint one step, the one the first timer announced two steps ahead,
// which the workers' requests carry to the others, also ahead of a
// --checkpoint_every step being captured; after a rewind a worker carries
// the new announcement, not the old one; a step announced too late for a
// server makes it announce a later one; a step no server could have
// announced is ignored. And an async checkpoint is never labelled below the
// last one written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "common/rpc_metadata.h"
#include "server/shard_checkpoint.h"
#include "tests/checkpoints_on_demand.h"
#include "tests/sparse_test_rows.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

constexpr absl::Duration kInterval = absl::Seconds(60);

ServerOptions ByTime(Mode mode, int servers, int workers, const std::string& dir, int64_t every_steps = 0) {
  ServerOptions o = SyncOptions(servers, workers);
  o.checkpoint_every_steps = every_steps;
  o.job.mode = mode;
  if (mode == Mode::kSsp) o.job.staleness = 1;
  o.checkpoint_dir = dir;
  o.checkpoint_every_interval = kInterval;
  o.checkpoint_on_shutdown = false;
  o.worker_timeout = absl::Hours(1);  // the servers' clock jumps by intervals: no worker is taken for dead
  return o;
}

std::vector<int64_t> Steps(TestCluster& cluster, int s) { return cluster.core(s)->Stats().checkpoint_steps; }

// The step server s announces (of its timeline), or -1 when none.
int64_t Announced(TestCluster& cluster, int s) {
  const std::optional<CheckpointStep> announced = cluster.core(s)->AnnouncedCheckpointStep();
  return announced ? announced->step : -1;
}

// An Admin status call to server s carrying `step` as the announced
// checkpoint step; the step the answer announces ("" when none).
std::string CallWithStep(TestCluster& cluster, int s, const std::string& step) {
  wire::AdminRequest req;
  req.set_action(wire::ADMIN_STATUS);
  wire::AdminResponse resp;
  grpc::ClientContext ctx;
  ctx.AddMetadata(kCheckpointStepKey, step);
  REQUIRE(cluster.RawStub(s)->Admin(&ctx, req, &resp).ok());
  const auto& trailing = ctx.GetServerTrailingMetadata();
  auto it = trailing.find(kCheckpointStepKey);
  return it == trailing.end() ? "" : std::string(it->second.data(), it->second.size());
}

// async labels a checkpoint by the slowest live worker's clock, which drops
// when a worker far behind (here a new one) joins: the newest weights must
// not be written under a label below the last, where pruning (keep 2)
// deleted them as soon as they were written.
TEST_CASE("an async checkpoint is never labelled below the last one written", "[checkpoint]") {
  const std::string dir = TempDir("async-label");
  ServerOptions o = SyncOptions(1, 2);
  o.job.mode = Mode::kAsync;
  o.checkpoint_dir = dir;
  o.checkpoint_every_steps = 2;
  o.checkpoint_on_shutdown = false;
  o.worker_timeout = absl::Seconds(2);
  ManualClock clock;
  TestCluster cluster(o, HostOptions(), &clock);
  cluster.PutClientsOnRealClock();
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  for (int i = 0; i < 40; ++i) {  // rank 1, silent from the start, is taken for dead (rank 0 registers again)
    clock.Advance(absl::Milliseconds(100));
    cluster.core(0)->Tick();
  }
  for (int step = 0; step < 5; ++step) {
    REQUIRE(PushAll(*worker, step, Filled(1)).ok());
    cluster.core(0)->Tick();
  }
  REQUIRE(Steps(cluster, 0) == std::vector<int64_t>{2, 4});
  JobView view = o.job;
  view.layout_hash = LayoutHash(SmallLayout());
  REQUIRE(cluster.core(0)->Register(1, view, std::nullopt).ok());  // at clock 0: the slowest live worker
  absl::StatusOr<std::string> path = cluster.core(0)->CheckpointNow();
  REQUIRE(path.ok());
  CHECK(std::filesystem::exists(*path));
  CHECK(*path == ShardCheckpointPath(dir, 0, 1, 4));  // the last label again, with the newest weights
  CHECK(Steps(cluster, 0) == std::vector<int64_t>{2, 4});
}

TEST_CASE("servers whose timers run apart checkpoint the step the first announced", "[checkpoint]") {
  const Mode mode = GENERATE(Mode::kSync, Mode::kSsp);
  // With --checkpoint_every too, whose step (100) is being captured: the
  // announced one goes first.
  const int64_t every = GENERATE(0, 100);
  INFO(ModeName(mode) << ", --checkpoint_every=" << every);
  CheckpointsOnDemand servers(ByTime(mode, 2, 2, TempDir("by-time"), every));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto step = [&](int s) {
    INFO("step " << s);
    REQUIRE(PushAll(*a, s, Filled(1)).ok());
    REQUIRE(PushAll(*b, s, Filled(2)).ok());
    auto w = Zeros(SmallLayout());
    REQUIRE(PullAll(*a, s + 1, w).ok());
    REQUIRE(PullAll(*b, s + 1, w).ok());
  };
  step(0);
  step(1);
  // Server 1's timer restarts half an interval after server 0's.
  servers.clock.Advance(kInterval / 2);
  REQUIRE(cluster.core(1)->CheckpointNow().ok());  // of step 2
  servers.clock.Advance(kInterval / 2);
  REQUIRE(servers.TickUntil([&] { return Announced(cluster, 0) >= 0; }));
  REQUIRE(Announced(cluster, 0) == 4);  // two ahead of step 2 (server 1's timer is not due)

  for (int s = 2; s < 6; ++s) step(s);
  REQUIRE(servers.Reach(2, 4));
  REQUIRE(Announced(cluster, 1) == 4);  // heard through the workers
  // One checkpoint by time, of one step, on both; none of a step of its own
  // (the two newest are kept: server 1's step 0 has gone).
  REQUIRE(Steps(cluster, 0) == std::vector<int64_t>{0, 4});
  REQUIRE(Steps(cluster, 1) == std::vector<int64_t>{2, 4});
}

TEST_CASE("after its rewind a worker carries the servers' new announcement, not one from before it", "[checkpoint]") {
  // One worker: the one that rewinds, whose registration heard the old step
  // from a server not yet rewound.
  CheckpointsOnDemand servers(ByTime(Mode::kSync, 2, 1, TempDir("by-time-rewind")));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  auto push = [&](int s) {
    const absl::Status pushed = PushAll(*a, s, Filled(1));
    INFO("step " << s << ": " << pushed.ToString());
    REQUIRE(pushed.ok());
  };
  auto announced_by_0 = [&] { return Announced(cluster, 0); };
  push(0);
  push(1);
  servers.clock.Advance(kInterval);
  REQUIRE(servers.TickUntil([&] { return announced_by_0() == 4; }));
  for (int s = 2; s < 30; ++s) push(s);
  REQUIRE(servers.Reach(2, 4));
  // The next announcement (32) reaches the worker; server 1 crashes before
  // step 32, and the job goes back to 4, far behind it.
  servers.clock.Advance(kInterval);
  REQUIRE(servers.TickUntil([&] { return announced_by_0() == 32; }));
  push(30);
  cluster.Restart(1);
  REQUIRE(IsRejoin(PushAll(*a, 31, Filled(1))));
  REQUIRE(a->Register().value() == 4);
  REQUIRE(announced_by_0() == -1);  // dropped with the steps after 4
  // Only server 0's timer is due next: it announces 6, which must reach server 1.
  servers.clock.Advance(kInterval / 2);
  REQUIRE(cluster.core(1)->CheckpointNow().ok());
  servers.clock.Advance(kInterval / 2);
  REQUIRE(servers.TickUntil([&] { return announced_by_0() == 6; }));
  for (int s = 4; s < 8; ++s) push(s);
  REQUIRE(servers.Reach(2, 6));
}

TEST_CASE("a sync server past the announced step announces a later one", "[checkpoint]") {
  CheckpointsOnDemand servers(ByTime(Mode::kSync, 1, 1, TempDir("by-time-late")));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  for (int s = 0; s < 4; ++s) REQUIRE(PushAll(*a, s, Filled(1)).ok());  // keys at step 4
  REQUIRE(CallWithStep(cluster, 0, "0:3") == "0:6");  // too late for 3: two ahead of 4, armed at once
  for (int s = 4; s < 7; ++s) REQUIRE(PushAll(*a, s, Filled(1)).ok());
  REQUIRE(servers.TickUntil([&] { return Steps(cluster, 0).back() == 6; }));
  REQUIRE(Steps(cluster, 0) == std::vector<int64_t>{0, 6});
}

TEST_CASE("a sync server of rows only takes an announced step before its --checkpoint_every one",
          "[checkpoint][sparse]") {
  CheckpointsOnDemand servers(ByTime(Mode::kSync, 2, 1, TempDir("by-time-rows"), /*every_steps=*/100));
  TestCluster& cluster = servers.cluster;
  Layout layout;
  layout.tensors.push_back({"bias", {1}});  // one key, on one server
  layout.tables.push_back(ExactSpec(RowOptimizerKind::kSgd, 4));
  auto worker = cluster.Worker(0, layout);
  REQUIRE(worker->Init(Zeros(layout)).ok());
  const int keyless = cluster.core(0)->Stats().num_keys == 0 ? 0 : 1;
  REQUIRE(cluster.core(keyless)->Stats().num_keys == 0);
  int64_t id = 0;
  while (RowServer(id, 2) != keyless) ++id;
  const std::vector<float> grad(4, 1.0f);
  const float bias_grad = 1.0f;
  auto push = [&](int step) {
    REQUIRE(worker->Push(step, {{0, &bias_grad}}).ok());
    REQUIRE(worker->PushRows(step, 0, &id, 1, grad.data()).ok());
  };
  push(0);
  push(1);
  cluster.core(keyless)->Tick();  // arms the tables' capture of step 100
  REQUIRE(CallWithStep(cluster, keyless, "0:4") == "0:4");  // the tables stand at step 2
  for (int step = 2; step < 6; ++step) push(step);
  REQUIRE(servers.TickUntil([&] { return Steps(cluster, keyless).back() == 4; }));
  REQUIRE(Steps(cluster, keyless) == std::vector<int64_t>{0, 4});
}

TEST_CASE("an announced step no server could have sent is ignored", "[checkpoint]") {
  const Mode mode = GENERATE(Mode::kSync, Mode::kSsp, Mode::kAsync);
  INFO(ModeName(mode));
  CheckpointsOnDemand servers(ByTime(mode, 1, 1, TempDir("by-time-bad")));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  for (const char* bad : {"0:1000000", "0:-3", "x", "", "5", "0:99999999999999999999", "1:5"}) {
    INFO(bad);  // out of reach, malformed, or of another timeline (from before a rewind)
    REQUIRE(CallWithStep(cluster, 0, bad).empty());
    REQUIRE(Announced(cluster, 0) == -1);
  }
  // Within reach it is taken, but in async, where each server keeps its own timer.
  REQUIRE(CallWithStep(cluster, 0, "0:5") == (mode == Mode::kAsync ? "" : "0:5"));
}

TEST_CASE("the announced step's text", "[checkpoint]") {
  for (const CheckpointStep c : {CheckpointStep{0, 0}, CheckpointStep{3, 123456789012}, CheckpointStep{1, 999999999999999999}}) {
    const std::optional<CheckpointStep> back = ParseCheckpointStep(CheckpointStepText(c));
    REQUIRE(back.has_value());
    REQUIRE(back->timeline == c.timeline);
    REQUIRE(back->step == c.step);
  }
  REQUIRE(CheckpointStepText({2, 17}) == "2:17");
  for (const char* bad : {"", "3", ":3", "3:", "-1:3", "1:-3", "1:1.5", "1:12a", " 1:3", "1::3", "1:3:4",
                          "1:99999999999999999999"}) {
    INFO(bad);
    REQUIRE(!ParseCheckpointStep(bad).has_value());
  }
  // The newer of two: a later timeline first.
  REQUIRE(CheckpointStep{0, 90} < CheckpointStep{1, 4});
  REQUIRE(CheckpointStep{1, 4} < CheckpointStep{1, 5});
}

}  // namespace
}  // namespace shardps::testing
