// DESIGN.md "Failures", in-process over real gRPC: a restarted server brings
// a sync job back to the newest step every server holds (each rewind once
// per restart), an async job simply goes on, a server that stays away is
// given up after server_timeout on a manual clock, and Shutdown() runs every
// callback exactly once.
#include <catch2/catch.hpp>

#include <atomic>
#include <list>
#include <thread>

#include "absl/synchronization/notification.h"
#include "server/shard_checkpoint.h"
#include "tests/checkpoints_on_demand.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

TEST_CASE("sync: a restarted server rewinds the job to the newest step every server holds", "[recovery]") {
  CheckpointsOnDemand servers(CrashingServers(Mode::kSync, 2, 2, TempDir("rewind-sync")));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  std::vector<std::vector<std::vector<float>>> after(7, Zeros(SmallLayout()));
  for (int step = 0; step < 6; ++step) {
    REQUIRE(PushAll(*a, step, Filled(step + 1)).ok());
    REQUIRE(PushAll(*b, step, Filled(step + 2)).ok());
    REQUIRE(PullAll(*a, step + 1, after[step + 1]).ok());
    if (step == 3) REQUIRE(servers.Reach(2, 4));
  }
  cluster.Restart(1);  // it restores step 4 and awaits a rewind; server 0 is at step 6

  // The next push meets the restarted server: the worker must line up again.
  const absl::Status pushed = PushAll(*a, 6, Filled(1));
  INFO(pushed.ToString());
  REQUIRE(IsRejoin(pushed));
  absl::StatusOr<int64_t> step = a->Register();
  REQUIRE(step.ok());
  REQUIRE(*step == 4);
  REQUIRE(a->Stats().rewinds == 1);
  REQUIRE(b->Register().value() == 4);  // the other worker lines up without a second rewind
  REQUIRE(b->Stats().rewinds == 0);
  for (int s = 0; s < 2; ++s) {
    const ServerStats stats = cluster.core(s)->Stats();
    REQUIRE(stats.rewinds == 1);
    REQUIRE(stats.timeline == 1);
    REQUIRE(stats.max_version == 4);
  }
  REQUIRE(cluster.core(0)->Stats().steps_lost_total == 2);  // at most --checkpoint_every

  // Steps 4 and 5 again, with the same gradients: the same weights as the first time.
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 4, w).ok());
  REQUIRE(w == after[4]);
  for (int replay = 4; replay < 6; ++replay) {
    REQUIRE(PushAll(*a, replay, Filled(replay + 1)).ok());
    REQUIRE(PushAll(*b, replay, Filled(replay + 2)).ok());
  }
  REQUIRE(PullAll(*b, 6, w).ok());
  REQUIRE(w == after[6]);
}

TEST_CASE("async: a restarted server continues from its checkpoint and nothing else rolls back", "[recovery]") {
  CheckpointsOnDemand servers(CrashingServers(Mode::kAsync, 2, 1, TempDir("restart-async")));
  TestCluster& cluster = servers.cluster;
  auto a = cluster.Worker(0);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  for (int step = 0; step < 4; ++step) REQUIRE(PushAll(*a, step, Filled(1)).ok());
  REQUIRE(servers.Reach(2, 4));
  for (int step = 4; step < 6; ++step) REQUIRE(PushAll(*a, step, Filled(1)).ok());
  const int64_t registrations = a->Stats().registrations;
  cluster.Restart(1);
  // The client registers again by itself and the push goes through.
  REQUIRE(PushAll(*a, 6, Filled(1)).ok());
  REQUIRE(a->Stats().registrations == registrations + 1);
  REQUIRE(cluster.core(0)->Stats().max_version == 7);  // never rolled back
  REQUIRE(cluster.core(1)->Stats().max_version == 5);  // step 4's checkpoint, then this push
  REQUIRE(cluster.core(1)->Stats().rewinds == 0);
  // Each key holds -(its pushes), lr 1: server 0's keys -7, server 1's -5.
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*a, 7, w).ok());
  const KeyMap map = *KeyMap::Build(SmallLayout(), 2, kSmallPartitionBytes);
  for (const ChunkInfo& c : map.chunks()) {
    INFO(KeyName(c.key) << " on server " << c.server);
    REQUIRE(w[c.key.tensor][c.offset] == (c.server == 0 ? -7.0f : -5.0f));
  }
}

// A sync core with a checkpoint of step 0, and the view workers register with.
struct CheckpointedCore {
  explicit CheckpointedCore(const std::string& dir) {
    o = SyncOptions(1, 1);
    o.checkpoint_dir = dir;
    view = o.job;
    view.layout_hash = LayoutHash(SmallLayout());
  }
  std::unique_ptr<ParameterServer> Start() {
    auto core = ParameterServer::Create(o, &clock);
    REQUIRE(core.ok());
    return *std::move(core);
  }
  void Initialise(ParameterServer& core) {
    auto reg = core.Register(0, view, std::nullopt);
    REQUIRE(reg.ok());
    std::vector<ChunkPayload> chunks;
    const KeyMap map = *KeyMap::Build(SmallLayout(), 1, kSmallPartitionBytes);
    for (const ChunkInfo& c : map.chunks()) {
      zeros.emplace_back(c.length, 0.0f);
      chunks.push_back({c.key, wire::DTYPE_FLOAT32, {{reinterpret_cast<const char*>(zeros.back().data()),
                                                       static_cast<size_t>(c.length) * 4}}});
    }
    const absl::Status init = core.Init(reg->session_id, SmallLayout(), chunks).status();
    INFO(init.ToString());
    REQUIRE(init.ok());  // writes the step-0 checkpoint
  }
  ServerOptions o;
  JobView view;
  ManualClock clock;
  std::list<std::vector<float>> zeros;
};

// A waiting pull of rows on a server that did not restart ends with the
// rewind, as a dense one does, instead of waiting out its deadline.
TEST_CASE("sync: a rewind ends the pulls of rows waiting on the servers that did not restart", "[recovery][sparse]") {
  absl::Notification done;  // before the worker: its shutdown may answer the pull
  absl::Status pulled;
  CheckpointsOnDemand servers(CrashingServers(Mode::kSync, 2, 1, TempDir("rewind-rows")));
  TestCluster& cluster = servers.cluster;
  Layout layout = SmallLayout();
  TableSpec table;
  table.name = "emb";
  table.dim = 2;
  table.init_scale = 0;
  layout.tables.push_back(table);
  auto worker = cluster.Worker(0, layout);
  REQUIRE(worker->Init(Zeros(layout)).ok());
  int64_t id = 0;
  while (RowServer(id, 2) != 0) ++id;  // a row of server 0, which stays up
  std::vector<float> grad(2, 1.0f), row(2, 0.0f);
  for (int step = 0; step < 4; ++step) {
    REQUIRE(PushAll(*worker, step, Filled(1)).ok());
    REQUIRE(worker->PushRows(step, 0, &id, 1, grad.data()).ok());
  }
  REQUIRE(servers.Reach(2, 4));
  worker->PullRowsAsync(9, 0, &id, 1, row.data(), [&](absl::Status s) {  // waits for step 9 on server 0
    pulled = s;
    done.Notify();
  });
  cluster.Restart(1);
  REQUIRE(worker->Register().value() == 4);  // server 0 rewinds too
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));  // not its 120 s deadline
  INFO(pulled.ToString());
  CHECK(IsRejoin(pulled));
}

TEST_CASE("a rewind is applied once per restart", "[recovery]") {
  CheckpointedCore setup(TempDir("rewind-once"));
  auto core = setup.Start();
  setup.Initialise(*core);
  auto first = core->Rewind(0, 1, {{1, 42}});
  REQUIRE(first.ok());
  REQUIRE(first->rewound);
  auto again = core->Rewind(0, 1, {{1, 42}});  // a second worker that saw the same restart
  REQUIRE(again.ok());
  REQUIRE(!again->rewound);
  REQUIRE(core->Stats().timeline == 1);
  REQUIRE(core->Rewind(0, 2, {{1, 43}})->rewound);  // server 1 restarted again
  REQUIRE(core->Stats().timeline == 2);
  REQUIRE(core->Rewind(0, 2, {{1, 44}}).status().code() == absl::StatusCode::kFailedPrecondition);  // timeline 2 is taken
  REQUIRE(core->Rewind(7, 3, {{1, 44}}).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a restored server awaits a rewind that names it, and refuses traffic until then", "[recovery]") {
  CheckpointedCore setup(TempDir("awaiting"));
  {
    auto core = setup.Start();
    setup.Initialise(*core);
  }
  auto core = setup.Start();  // restores step 0
  auto reg = core->Register(0, setup.view, std::nullopt);
  REQUIRE(reg.ok());
  REQUIRE(reg->awaiting_rewind);
  REQUIRE(reg->checkpoint_steps == std::vector<int64_t>{0});
  const absl::Status pulled = core->Heartbeat(reg->session_id).status();
  REQUIRE(pulled.ok());  // heartbeats are fine; pushes and pulls are not
  REQUIRE(core->Push(reg->session_id, 0, {}).status().code() == absl::StatusCode::kAborted);
  auto wrong = core->Rewind(0, 1, {{0, core->incarnation() + 1}});
  REQUIRE(wrong.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(wrong.status().message()), Catch::Contains("does not name"));
  auto right = core->Rewind(0, 1, {{0, core->incarnation()}});
  REQUIRE(right.ok());
  REQUIRE(!core->Stats().awaiting_rewind);
  // A worker that planned its step before the rewind is refused.
  const auto stale = core->Register(0, setup.view, ParameterServer::Resume{3, /*timeline=*/0});
  REQUIRE(stale.status().code() == absl::StatusCode::kAborted);
  REQUIRE_THAT(std::string(stale.status().message()), Catch::Contains("timeline 0") && Catch::Contains("on timeline 1"));
  REQUIRE(core->Register(0, setup.view, ParameterServer::Resume{0, 1}).ok());
}

// A server restarted without a --checkpoint_dir has lost its shard: a worker
// that registers looks again (an answer may predate the job's init reaching
// a server) and then fails, naming it, instead of training on nothing.
TEST_CASE("a server restarted without a checkpoint is a lost shard: registration fails naming it", "[recovery]") {
  ServerOptions o = SyncOptions(2, 1);
  o.job.mode = Mode::kAsync;
  o.checkpoint_on_shutdown = false;
  TestCluster cluster(o);
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*worker, 0, Filled(1)).ok());
  worker->Shutdown();
  cluster.Restart(1);  // no checkpoint_dir: it comes back empty
  auto again = PsClient::Connect(cluster.ClientFor(0));
  REQUIRE(again.ok());
  const absl::StatusOr<int64_t> joined = (*again)->Register();
  REQUIRE(joined.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(joined.status().message()), Catch::Contains("server 1 holds no weights"));
  (*again)->Shutdown();
}

TEST_CASE("an async server refuses a rewind", "[recovery]") {
  CheckpointedCore setup(TempDir("async-rewind"));
  setup.o.job.mode = Mode::kAsync;
  auto core = setup.Start();
  REQUIRE(core->Rewind(0, 1, {{0, 1}}).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("sync: a pull issued before the worker lined up again ends as a rejoin, not replayed into the new session",
          "[recovery]") {
  ManualClock clock;  // holds the pull's retry back until the worker has registered again
  TestCluster cluster(CrashingServers(Mode::kSync, 1, 1, TempDir("stale-pull")), HostOptions(), &clock);
  auto a = cluster.Worker(0);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*a, 0, Filled(1)).ok());
  absl::Notification done;
  absl::Status result;
  auto w = Zeros(SmallLayout());
  a->PullAsync(3, {{0, w[0].data()}}, [&](absl::Status s) {  // waits for a step far ahead
    result = s;
    done.Notify();
  });
  cluster.Restart(0);  // the waiting pull fails UNAVAILABLE; its retry waits on the manual clock
  // Register's own first attempt may meet the client's channel before it has
  // found the restarted server; its retry then waits on the manual clock too,
  // which moves only when Register has not returned within a second.
  absl::StatusOr<int64_t> step;
  absl::Notification registered;
  std::thread registering([&] {
    step = a->Register();  // the job rewinds to the checkpoint of step 0 or 2
    registered.Notify();
  });
  while (!registered.WaitForNotificationWithTimeout(absl::Seconds(1))) clock.Advance(absl::Milliseconds(250));
  registering.join();
  REQUIRE(step.ok());
  REQUIRE(*step <= 2);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!done.HasBeenNotified() && absl::Now() < give_up) {
    clock.Advance(absl::Milliseconds(250));
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(done.HasBeenNotified());  // replayed into the new session, it would wait for step 3 forever
  INFO(result.ToString());
  REQUIRE(IsRejoin(result));
  // Almost always the client ends the retried pull itself. Rarely a pull part
  // never left the client before the old server went (gRPC sends it to the
  // new one), or the clock moved for Register: then the new server, which
  // knows no such session, refuses it. Either way it is not replayed.
  REQUIRE_THAT(std::string(result.message()), Catch::Contains("issued before this worker registered again") ||
                                                  Catch::Contains("unknown session"));
}

TEST_CASE("a server that stays away is waited for up to server_timeout, then named", "[recovery]") {
  ManualClock clock;
  ClientOptions c;
  const int port = FreePort();  // nothing listens there
  c.servers = {absl::StrCat("127.0.0.1:", port)};
  c.job = SyncOptions(1, 1).job;
  c.layout = SmallLayout();
  c.server_timeout = absl::Seconds(3);
  c.clock = &clock;
  auto client = PsClient::Connect(c);
  REQUIRE(client.ok());
  absl::Notification done;
  absl::Status result;
  auto w = Zeros(SmallLayout());
  (*client)->PullAsync(0, {{0, w[0].data()}}, [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  // Each 250 ms of the manual clock makes one retry due; wait (real time)
  // for it to fail before moving on.
  absl::Duration waited;
  while (!done.HasBeenNotified() && waited < absl::Seconds(10)) {
    const int64_t retries = (*client)->Stats().retries;
    clock.Advance(absl::Milliseconds(250));
    waited += absl::Milliseconds(250);
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while ((*client)->Stats().retries == retries && !done.HasBeenNotified() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  REQUIRE(done.HasBeenNotified());
  REQUIRE(waited >= absl::Seconds(3));
  REQUIRE(waited <= absl::Seconds(3.5));
  INFO(result.ToString());
  REQUIRE(result.code() == absl::StatusCode::kUnavailable);
  REQUIRE_THAT(std::string(result.message()),
               Catch::Contains(absl::StrCat("server 0 at 127.0.0.1:", port)) && Catch::Contains("server timeout 3s"));
}

TEST_CASE("Shutdown() ends every call in flight and runs each callback once", "[recovery]") {
  TestCluster cluster(SyncOptions(1, 2));
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);  // registered, never pushes: a's pull waits
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*a, 0, Filled(1)).ok());
  std::atomic<int> pull_calls{0}, late_calls{0};
  absl::Status pull_status, late_status;
  auto w = Zeros(SmallLayout());
  a->PullAsync(1, {{0, w[0].data()}, {1, w[1].data()}}, [&](absl::Status s) {
    pull_status = s;
    pull_calls.fetch_add(1);
  });

  ClientOptions dead = cluster.ClientFor(0);
  dead.servers = {absl::StrCat("127.0.0.1:", FreePort())};
  auto retrying = PsClient::Connect(dead);
  REQUIRE(retrying.ok());
  std::atomic<int> push_calls{0};
  absl::Status push_status;
  auto g = Filled(1);
  (*retrying)->PushAsync(0, {{0, g[0].data()}}, [&](absl::Status s) {
    push_status = s;
    push_calls.fetch_add(1);
  });

  a->Shutdown();
  REQUIRE(pull_calls == 1);
  REQUIRE(pull_status.code() == absl::StatusCode::kCancelled);
  (*retrying)->Shutdown();
  REQUIRE(push_calls == 1);
  REQUIRE(push_status.code() == absl::StatusCode::kCancelled);
  a->PullAsync(1, {{0, w[0].data()}}, [&](absl::Status s) {
    late_status = s;
    late_calls.fetch_add(1);
  });
  REQUIRE(late_calls == 1);  // at once, on this thread
  REQUIRE(late_status.code() == absl::StatusCode::kCancelled);
  a->Shutdown();  // idempotent
  REQUIRE(pull_calls == 1);
}

}  // namespace
}  // namespace shardps::testing
