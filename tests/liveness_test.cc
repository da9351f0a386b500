// DESIGN.md "Liveness", on a ManualClock: a dead worker never hangs a sync
// step, is counted, and a returning worker rejoins at the current step; an
// idle worker's heartbeats keep it alive; a server's own pause is not the
// workers' silence. No test sleeps: time moves only when the test says so.
#include <catch2/catch.hpp>

#include <atomic>
#include <list>
#include <optional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/metrics_http.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {


// A server core on a manual clock, driven directly: each worker is a
// session, each push carries small integers, so means compare with ==.
class CoreOnManualClock {
 public:
  explicit CoreOnManualClock(ServerOptions o) : view_(o.job) {
    view_.layout_hash = LayoutHash(SmallLayout());
    auto core = ParameterServer::Create(o, &clock_);
    REQUIRE(core.ok());
    core_ = *std::move(core);
  }
  uint64_t Join(int rank) {
    auto reg = core_->Register(rank, view_, std::nullopt);
    REQUIRE(reg.ok());
    last_step_ = reg->current_step;
    return reg->session_id;
  }
  void Init(uint64_t session) {
    std::vector<ChunkPayload> chunks;
    for (const ChunkInfo& c : KeysOfServer0()) chunks.push_back({c.key, wire::DTYPE_FLOAT32, {Bytes(c.length, 0)}});
    REQUIRE(core_->Init(session, SmallLayout(), chunks).ok());
  }
  absl::Status Push(uint64_t session, int64_t step, float value) {
    std::vector<ChunkPayload> chunks;
    for (const ChunkInfo& c : KeysOfServer0()) chunks.push_back({c.key, wire::DTYPE_FLOAT32, {Bytes(c.length, value)}});
    return core_->Push(session, step, chunks).status();
  }
  // A push of `step` whose first chunk is one value short: refused.
  absl::Status PushShort(uint64_t session, int64_t step) {
    const ChunkInfo first = KeysOfServer0()[0];
    return core_->Push(session, step, {{first.key, wire::DTYPE_FLOAT32, {Bytes(first.length - 1, 1)}}}).status();
  }
  // Starts a pull of key (0, 0) for `step`; its result lands in *out.
  void Pull(uint64_t session, int64_t step, std::optional<absl::StatusOr<float>>* out, bool after_own_push = false) {
    core_->Pull(session, step, {{0, 0}}, wire::DTYPE_FLOAT32, after_own_push, absl::InfiniteFuture(),
                [out](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                  if (chunks.ok()) {
                    *out = (*(*chunks)[0].weights)[0];
                  } else {
                    *out = chunks.status();
                  }
                });
  }
  // Moves time by `total` in ticks of 100 ms, as the housekeeping thread
  // would; the workers of `alive` send a heartbeat every tick.
  void Pass(absl::Duration total, const std::vector<uint64_t>& alive = {}) {
    for (absl::Duration t; t < total; t += absl::Milliseconds(100)) {
      clock_.Advance(absl::Milliseconds(100));
      for (uint64_t session : alive) REQUIRE(core_->Heartbeat(session).ok());
      core_->Tick();
    }
  }
  ParameterServer& core() { return *core_; }
  ManualClock& clock() { return clock_; }
  int64_t last_step() const { return last_step_; }

 private:
  static std::vector<ChunkInfo> KeysOfServer0() {
    return KeyMap::Build(SmallLayout(), 1, kSmallPartitionBytes)->ChunksOfServer(0);
  }
  // Payload bytes of n floats of `value`, kept alive by the fixture.
  absl::string_view Bytes(int64_t n, float value) {
    buffers_.emplace_back(n, value);
    return {reinterpret_cast<const char*>(buffers_.back().data()), static_cast<size_t>(n) * 4};
  }
  ManualClock clock_;
  JobView view_;
  std::unique_ptr<ParameterServer> core_;
  std::list<std::vector<float>> buffers_;
  int64_t last_step_ = 0;
};

// A pull that arrives as the server shuts down is answered either way: it
// is refused, or it waits and Shutdown() fails it. One lost in between would
// keep its gRPC call open, and the server's own shutdown would wait for it
// forever. Many rounds, each with pulls racing the shutdown.
TEST_CASE("every pull racing a shutdown is answered", "[liveness]") {
  int lost = 0;
  for (int round = 0; round < 40; ++round) {
    CoreOnManualClock s(SyncOptions(1, 1));
    const uint64_t w0 = s.Join(0);
    s.Init(w0);
    std::atomic<int> issued{0}, answered{0};
    std::atomic<bool> stop{false};
    std::thread puller([&] {
      while (!stop.load()) {
        issued.fetch_add(1);
        s.core().Pull(w0, 5, {{0, 0}}, wire::DTYPE_FLOAT32, false, absl::InfiniteFuture(),
                      [&](absl::StatusOr<std::vector<PulledChunk>>) { answered.fetch_add(1); });
      }
    });
    while (issued.load() < 50 * (round % 4 + 1)) std::this_thread::yield();
    s.core().Shutdown();
    for (int more = issued.load() + 20; issued.load() < more;) std::this_thread::yield();
    stop.store(true);
    puller.join();
    lost += issued.load() - answered.load();
  }
  REQUIRE(lost == 0);
}

TEST_CASE("a sync step completes without a silent worker, which rejoins at the current step", "[liveness]") {
  ServerOptions o = SyncOptions(1, 3);
  o.worker_timeout = absl::Milliseconds(600);
  CoreOnManualClock s(o);
  const uint64_t w0 = s.Join(0), w1 = s.Join(1);
  s.Join(2);  // then silent
  s.Init(w0);
  REQUIRE(s.Push(w0, 0, 3).ok());
  REQUIRE(s.Push(w1, 0, 3).ok());
  std::optional<absl::StatusOr<float>> pulled;
  s.Pull(w0, 1, &pulled);
  s.Pass(absl::Milliseconds(500), {w0, w1});
  REQUIRE(!pulled);  // worker 2 is not dead yet: the step waits for it
  s.Pass(absl::Milliseconds(200), {w0, w1});
  REQUIRE(pulled);
  REQUIRE(**pulled == -3.0f);  // the mean of the two live workers
  REQUIRE(s.core().Stats().dead_workers_total == 1);
  REQUIRE(s.core().Stats().live_workers == 2);

  const uint64_t back = s.Join(2);  // worker 2 returns
  REQUIRE(s.last_step() == 1);     // ... and continues at step 1
  REQUIRE(s.Push(w0, 1, 3).ok());
  REQUIRE(s.Push(w1, 1, 3).ok());
  REQUIRE(s.Push(back, 1, 6).ok());
  std::optional<absl::StatusOr<float>> again;
  s.Pull(back, 2, &again);
  REQUIRE(again);
  REQUIRE(**again == -3.0f - 4.0f);  // the mean of 3, 3 and 6: all three count again
  REQUIRE(s.core().Stats().live_workers == 3);
}

TEST_CASE("a worker that never registers does not hang the first sync step", "[liveness]") {
  ServerOptions o = SyncOptions(1, 2);
  o.worker_timeout = absl::Milliseconds(500);
  CoreOnManualClock s(o);
  const uint64_t w0 = s.Join(0);
  s.Init(w0);
  REQUIRE(s.Push(w0, 0, 1).ok());
  std::optional<absl::StatusOr<float>> pulled;
  s.Pull(w0, 1, &pulled);
  REQUIRE(!pulled);
  s.Pass(absl::Milliseconds(600), {w0});
  REQUIRE(pulled);
  REQUIRE(**pulled == -1.0f);
}

TEST_CASE("a server's own pause is not counted as its workers' silence", "[liveness]") {
  ServerOptions o = SyncOptions(1, 2);
  o.worker_timeout = absl::Seconds(5);
  o.pause_threshold = absl::Seconds(1);
  CoreOnManualClock s(o);
  const uint64_t w0 = s.Join(0), w1 = s.Join(1);
  s.Init(w0);
  s.Pass(absl::Seconds(4));           // both silent for 4 s: not yet dead
  s.clock().Advance(absl::Seconds(8));  // SIGSTOP for 8 s: no tick ran
  s.core().Tick();
  s.Pass(absl::Milliseconds(500));
  REQUIRE(s.core().Stats().dead_workers_total == 0);
  REQUIRE(s.core().Heartbeat(w0).ok());
  REQUIRE(s.core().Heartbeat(w1).ok());
  // Silence while the server runs still counts: worker 1 stops calling.
  s.Pass(absl::Seconds(6), {w0});
  REQUIRE(s.core().Stats().dead_workers_total == 1);
  REQUIRE(s.core().Heartbeat(w1).status().code() == absl::StatusCode::kAborted);
}

TEST_CASE("a loop's schedule starts when its owner says, not when its thread first runs", "[liveness]") {
  ManualClock clock;
  StopFlag stop;
  const absl::Time start = clock.Now();  // taken before the thread exists, as the client and server do
  clock.Advance(absl::Milliseconds(100));  // the clock moves on before the thread runs
  absl::Notification ran;
  std::thread loop([&] {
    stop.RunEvery(clock, start, absl::Milliseconds(50), [&] {
      if (!ran.HasBeenNotified()) ran.Notify();
    });
  });
  // Due at start + 50 ms, already past: the first round runs without another
  // Advance (counted from the thread's first look at the clock, it would not).
  const bool on_time = ran.WaitForNotificationWithTimeout(absl::Seconds(10));
  stop.Stop();
  loop.join();
  CHECK(on_time);
}

TEST_CASE("an idle worker's heartbeats keep it alive (real gRPC, manual clock)", "[liveness]") {
  ManualClock clock;
  ServerOptions o = SyncOptions(1, 1);
  o.worker_timeout = absl::Milliseconds(1500);
  HostOptions host;
  host.metrics_port = 0;
  TestCluster cluster(o, host, &clock);
  auto w = cluster.Worker(0);  // heartbeat interval 100 ms, on the same clock
  REQUIRE(w->Init(Zeros(SmallLayout())).ok());
  // 4 s in steps of 100 ms, well past the timeout, with no call but
  // heartbeats; each step waits (up to 10 s of real time) for the heartbeat
  // that the step makes due.
  for (int i = 0; i < 40; ++i) {
    const int64_t before = cluster.core(0)->Stats().heartbeats;
    clock.Advance(absl::Milliseconds(100));
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (cluster.core(0)->Stats().heartbeats == before && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    REQUIRE(cluster.core(0)->Stats().heartbeats > before);
  }
  REQUIRE(cluster.core(0)->Stats().dead_workers_total == 0);
  const std::string metrics = ScrapeLoopbackMetrics(cluster.host(0)->metrics_port());
  REQUIRE_THAT(metrics, Catch::Contains("shardps_live_workers{server=\"0\"} 1"));
  REQUIRE_THAT(metrics, Catch::Contains("shardps_dead_workers_total{server=\"0\"} 0"));
}

// PullRequest.after_own_push: an async pull that left with its push waits
// on the server for that push, and fails at once when the push is refused or
// its worker is declared dead, instead of at its deadline.
TEST_CASE("async: a pull after its own push waits for it; a refused push or a dead worker fails it", "[liveness]") {
  ServerOptions o = SyncOptions(1, 2);
  o.job.mode = Mode::kAsync;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
  o.worker_timeout = absl::Milliseconds(500);
  CoreOnManualClock s(o);
  const uint64_t w0 = s.Join(0), w1 = s.Join(1);
  s.Init(w0);
  std::optional<absl::StatusOr<float>> own;
  s.Pull(w0, 1, &own, /*after_own_push=*/true);
  REQUIRE(!own);  // worker 0 has not pushed step 0
  REQUIRE(s.Push(w1, 0, 2).ok());
  REQUIRE(!own);  // another worker's push does not release it
  REQUIRE(s.Push(w0, 0, 3).ok());
  REQUIRE(own);
  REQUIRE(**own == -5.0f);  // its own push and the other's
  std::optional<absl::StatusOr<float>> plain;
  s.Pull(w0, 2, &plain);
  REQUIRE(plain);  // without after_own_push an async pull never waits

  std::optional<absl::StatusOr<float>> refused;
  s.Pull(w0, 2, &refused, true);
  REQUIRE(!refused);
  REQUIRE(!s.PushShort(w0, 1).ok());
  REQUIRE(refused);
  REQUIRE(absl::IsFailedPrecondition(refused->status()));
  CHECK_THAT(std::string(refused->status().message()), Catch::Contains("its push of step 1 was refused"));

  std::optional<absl::StatusOr<float>> dead;
  s.Pull(w1, 2, &dead, true);
  s.Pass(absl::Milliseconds(400), {w0});
  REQUIRE(!dead);
  s.Pass(absl::Milliseconds(200), {w0});  // worker 1 is declared dead
  REQUIRE(dead);
  REQUIRE(absl::IsFailedPrecondition(dead->status()));
  CHECK_THAT(std::string(dead->status().message()), Catch::Contains("declared dead"));
}

// A refused push fails only the pulls that still wait for it: an ssp pull
// whose own push is applied keeps waiting for the staleness bound.
TEST_CASE("ssp: a refused push leaves a pull that waits only for the staleness bound", "[liveness]") {
  ServerOptions o = SyncOptions(1, 2);
  o.job.mode = Mode::kSsp;
  o.job.staleness = 0;
  o.async_lr_scaling = AsyncLrScaling::kNone;
  CoreOnManualClock s(o);
  const uint64_t w0 = s.Join(0), w1 = s.Join(1);
  s.Init(w0);
  REQUIRE(s.Push(w0, 0, 1).ok());
  std::optional<absl::StatusOr<float>> pulled;
  s.Pull(w0, 1, &pulled, /*after_own_push=*/true);
  REQUIRE(!pulled);  // its push is applied; worker 1 has not finished step 0
  REQUIRE(!s.PushShort(w0, 0).ok());
  REQUIRE(!pulled);  // still waiting for the bound, not failed
  REQUIRE(s.Push(w1, 0, 2).ok());
  REQUIRE(pulled);
  REQUIRE(**pulled == -3.0f);
}

}  // namespace
}  // namespace shardps::testing
