// DESIGN.md "Consistency": each sentence is checked here, over real gRPC on
// 127.0.0.1 with in-process servers.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/metrics_http.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// A worker whose requests carry one key (0) or up to 3 keys of a server
// (48 bytes): the semantics may not depend on how keys share requests.
std::unique_ptr<PsClient> WorkerWithRequests(const TestCluster& cluster, int rank, int64_t request_bytes) {
  ClientOptions o = cluster.ClientFor(rank);
  o.push_request_bytes = request_bytes;
  o.fetch_request_bytes = request_bytes;
  return cluster.Worker(o);
}

TEST_CASE("sync: every worker pulls exactly the mean; version equals the step", "[sync]") {
  constexpr int kWorkers = 3, kSteps = 5;
  const int64_t request_bytes = GENERATE(0, 48);
  TestCluster cluster(SyncOptions(2, kWorkers));
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int r = 0; r < kWorkers; ++r) workers.push_back(WorkerWithRequests(cluster, r, request_bytes));
  REQUIRE(workers[0]->Init(Zeros(SmallLayout())).ok());
  REQUIRE(workers[1]->Init(Zeros(SmallLayout())).ok());  // second writer: ignored

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      float expected = 0;
      for (int t = 0; t < kSteps; ++t) {
        // Gradients (r+1)*(t+1): the mean over 3 workers is 2*(t+1), exact.
        if (!PushAll(*workers[r], t, Filled(static_cast<float>((r + 1) * (t + 1)))).ok()) ++failures;
        expected -= 2.0f * (t + 1);  // lr = 1
        auto w = Zeros(SmallLayout());
        if (!PullAll(*workers[r], t + 1, w).ok() || !AllEqual(w, expected)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  for (int s = 0; s < 2; ++s) {
    REQUIRE(cluster.core(s)->Stats().min_version == kSteps);
    REQUIRE(cluster.core(s)->Stats().max_version == kSteps);
  }

  SECTION("a repeated push is acknowledged and ignored") {
    REQUIRE(PushAll(*workers[0], kSteps - 1, Filled(1000)).ok());
    auto w = Zeros(SmallLayout());
    REQUIRE(PullAll(*workers[0], kSteps, w).ok());
    REQUIRE(AllEqual(w, -30.0f));  // -2*(1+2+3+4+5), unchanged
    REQUIRE(cluster.core(0)->Stats().max_version == kSteps);
  }
  SECTION("a push for another step is refused naming both steps") {
    absl::Status s = PushAll(*workers[0], kSteps + 3, Filled(1));
    REQUIRE(s.code() == absl::StatusCode::kFailedPrecondition);
    REQUIRE_THAT(std::string(s.message()), Catch::Contains("step 8") && Catch::Contains("at step 5"));
  }
}

TEST_CASE("sync: keys that share a request each land where they belong, both ways", "[sync]") {
  const int64_t request_bytes = GENERATE(0, 48);
  TestCluster cluster(SyncOptions(2, 1));
  std::unique_ptr<PsClient> worker = WorkerWithRequests(cluster, 0, request_bytes);
  auto init = Zeros(SmallLayout()), grads = Zeros(SmallLayout());
  float v = 1;
  for (size_t t = 0; t < init.size(); ++t) {
    for (size_t i = 0; i < init[t].size(); ++i, ++v) {
      init[t][i] = 100 * v;
      grads[t][i] = v;  // lr = 1: each value ends at 99 times its place
    }
  }
  REQUIRE(worker->Init(init).ok());
  REQUIRE(PushAll(*worker, 0, grads).ok());
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*worker, 1, w).ok());
  for (size_t t = 0; t < w.size(); ++t) {
    for (size_t i = 0; i < w[t].size(); ++i) REQUIRE(w[t][i] == 99 * grads[t][i]);
  }
  // Each server's keys (44 and 36 bytes) went in one push with 48-byte
  // requests, in one per key without.
  for (int s = 0; s < 2; ++s) {
    if (request_bytes == 48) {
      CHECK(cluster.core(s)->Stats().pushes == 1);
    } else {
      CHECK(cluster.core(s)->Stats().pushes > 1);
    }
  }
}

TEST_CASE("sync: a pull waits for its version, up to its deadline", "[sync]") {
  HostOptions host;
  host.metrics_port = 0;
  TestCluster cluster(SyncOptions(1, 2), host);
  auto a = cluster.Worker(0);
  auto b = cluster.Worker(1);
  REQUIRE(a->Init(Zeros(SmallLayout())).ok());
  REQUIRE(PushAll(*a, 0, Filled(2)).ok());
  absl::Notification pulled;
  auto w = Zeros(SmallLayout());
  absl::Status pull_status;
  a->PullAsync(1, {{0, w[0].data()}, {1, w[1].data()}}, [&](absl::Status s) {
    pull_status = s;
    pulled.Notify();
  });
  // The pull reached the server and is held there, a request a key (one
  // key's bytes a fetch): b has not pushed.
  const int keys = cluster.core(0)->Stats().num_keys;
  REQUIRE(keys == 6);
  REQUIRE(AwaitWaitingPulls(cluster.core(0), keys));
  REQUIRE(!pulled.HasBeenNotified());
  REQUIRE_THAT(ScrapeLoopbackMetrics(cluster.host(0)->metrics_port()),
               Catch::Contains("shardps_waiting_pulls{server=\"0\"} 6"));
  const std::optional<wire::ServerStatus> status = cluster.AdminStatus(0);
  REQUIRE(status.has_value());
  REQUIRE(status->waiting_pulls() == 6);
  REQUIRE(PushAll(*b, 0, Filled(4)).ok());
  REQUIRE(pulled.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(pull_status.ok());
  REQUIRE(AllEqual(w, -3.0f));
  REQUIRE(cluster.core(0)->Stats().waiting_pulls == 0);

  ClientOptions impatient = cluster.ClientFor(0);
  impatient.pull_timeout = absl::Milliseconds(200);
  impatient.server_timeout = absl::Milliseconds(300);  // then it stops retrying
  auto c = PsClient::Connect(impatient);
  REQUIRE((*c)->Register().ok());
  REQUIRE(PullAll(**c, 7, w).code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(cluster.core(0)->Stats().max_version == 1);  // still serving
}

TEST_CASE("async: concurrent pushes are all applied; the version counts them", "[async]") {
  constexpr int kWorkers = 8, kPushes = 40;
  ServerOptions o = SyncOptions(2, kWorkers);
  o.job.mode = Mode::kAsync;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
  o.staleness_lr = StalenessLr::kNone;         // and stale ones undamped
  const int64_t request_bytes = GENERATE(0, 48);
  TestCluster cluster(o);
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int r = 0; r < kWorkers; ++r) workers.push_back(WorkerWithRequests(cluster, r, request_bytes));
  REQUIRE(workers[0]->Init(Zeros(SmallLayout())).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      for (int t = 0; t < kPushes; ++t) {
        if (!PushAll(*workers[r], t, Filled(1)).ok()) ++failures;
        auto w = Zeros(SmallLayout());
        if (!PullAll(*workers[r], t + 1, w).ok()) ++failures;  // never waits
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  auto w = Zeros(SmallLayout());
  REQUIRE(PullAll(*workers[0], 0, w).ok());
  REQUIRE(AllEqual(w, -static_cast<float>(kWorkers * kPushes)));  // no update lost
  REQUIRE(cluster.core(0)->Stats().min_version == kWorkers * kPushes);
  REQUIRE(cluster.core(1)->Stats().max_version == kWorkers * kPushes);
}

// Rank 0's Init writes thousands of keys; another worker polls a pull of
// the last until the server stops saying "not initialised" (as
// shardps.torch's other ranks do): what it reads must be the initial
// values, never the zeros the keys hold before Init writes them.
TEST_CASE("a pull that finds the server initialised reads the initial values, not zeros", "[sync]") {
  const Layout layout{{{"big", {40000}}}};  // 10,000 keys of 16 bytes
  ManualClock clock;
  absl::StatusOr<std::unique_ptr<ParameterServer>> made = ParameterServer::Create(SyncOptions(1, 2), &clock);
  REQUIRE(made.ok());
  ParameterServer* core = made->get();
  JobView view = SyncOptions(1, 2).job;
  view.layout_hash = LayoutHash(layout);
  absl::StatusOr<Registration> rank0 = core->Register(0, view, std::nullopt);
  absl::StatusOr<Registration> rank1 = core->Register(1, view, std::nullopt);
  REQUIRE((rank0.ok() && rank1.ok()));
  absl::StatusOr<KeyMap> map = KeyMap::Build(layout, 1, kSmallPartitionBytes);
  REQUIRE(map.ok());
  const std::vector<float> ones(40000, 1.0f);
  std::vector<ChunkPayload> chunks;
  for (const ChunkInfo& c : map->chunks()) {
    chunks.push_back({c.key, wire::DTYPE_FLOAT32,
                      {absl::string_view(reinterpret_cast<const char*>(ones.data() + c.offset), c.length * 4)}});
  }
  const ChunkKey last = map->chunks().back().key;
  absl::StatusOr<wire::InitOutcome> init = absl::UnknownError("not run");
  std::thread initialiser([&] { init = core->Init(rank0->session_id, layout, chunks); });
  std::vector<float> read;
  int refused = 0;
  while (read.empty()) {
    core->Pull(rank1->session_id, 0, {last}, wire::DTYPE_FLOAT32, false, absl::InfiniteFuture(),
               [&](absl::StatusOr<std::vector<PulledChunk>> got) {
                 if (got.ok()) {
                   read = *(*got)[0].weights;
                 } else {
                   ++refused;  // not initialised yet
                 }
               });
  }
  initialiser.join();
  REQUIRE(init.ok());
  CHECK(read == std::vector<float>(4, 1.0f));
  INFO(refused << " pulls refused before Init was done");
}

// A pull with no deadline (or whose caller has gone) of a step the job
// never reaches is not held until shutdown: an hour at most (kLongestWait).
TEST_CASE("a pull that came with no deadline is answered DEADLINE_EXCEEDED after kLongestWait", "[sync]") {
  ManualClock clock;
  TestCluster cluster(SyncOptions(1, 1), HostOptions(), &clock);
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  ParameterServer* core = cluster.core(0);
  JobView view = SyncOptions(1, 1).job;
  view.layout_hash = LayoutHash(SmallLayout());
  absl::StatusOr<Registration> reg = core->Register(0, view, std::nullopt);
  REQUIRE(reg.ok());
  std::optional<absl::Status> answered;
  core->Pull(reg->session_id, int64_t{1} << 40, {{0, 0}}, wire::DTYPE_FLOAT32, false, absl::InfiniteFuture(),
             [&](absl::StatusOr<std::vector<PulledChunk>> got) { answered = got.status(); });
  CHECK(!answered.has_value());
  CHECK(core->Stats().waiting_pulls == 1);
  clock.Advance(kLongestWait - absl::Seconds(1));
  core->Tick();
  CHECK(!answered.has_value());  // still within the hour
  clock.Advance(absl::Seconds(2));
  core->Tick();
  REQUIRE(answered.has_value());
  CHECK(answered->code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(core->Stats().waiting_pulls == 0);
}

// ssp with staleness 0: a worker that registers again part way through a
// step (a retried Register, or a push answered ABORTED) and pushes the step
// again finishes it; the keys it had pushed come back as duplicates and
// count as pushed, not as missing (its clock stayed behind, and every pull
// of the next step waited for it for good).
TEST_CASE("ssp: a worker registering again part way through a step still finishes it", "[ssp]") {
  ServerOptions o = SyncOptions(1, 1);
  o.job.mode = Mode::kSsp;
  ManualClock clock;
  TestCluster cluster(o, HostOptions(), &clock);
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  ParameterServer* core = cluster.core(0);
  JobView view = o.job;
  view.layout_hash = LayoutHash(SmallLayout());
  absl::StatusOr<KeyMap> map = KeyMap::Build(SmallLayout(), 1, kSmallPartitionBytes);
  REQUIRE(map.ok());
  const std::vector<float> zeros(16, 0.0f);
  auto chunks = [&](size_t n) {
    std::vector<ChunkPayload> out;
    for (size_t i = 0; i < n; ++i) {
      const ChunkInfo& c = map->chunks()[i];
      out.push_back({c.key, wire::DTYPE_FLOAT32, {absl::string_view(reinterpret_cast<const char*>(zeros.data()), c.length * 4)}});
    }
    return out;
  };
  absl::StatusOr<Registration> first = core->Register(0, view, std::nullopt);
  REQUIRE(first.ok());
  REQUIRE(core->Push(first->session_id, 0, chunks(1)).ok());  // one key of step 0
  absl::StatusOr<Registration> again = core->Register(0, view, std::nullopt);
  REQUIRE(again.ok());
  REQUIRE(core->Push(again->session_id, 0, chunks(map->chunks().size())).ok());  // the whole step, sent again
  std::optional<absl::Status> answered;
  core->Pull(again->session_id, 1, {map->chunks().front().key}, wire::DTYPE_FLOAT32, false, absl::InfiniteFuture(),
             [&](absl::StatusOr<std::vector<PulledChunk>> got) { answered = got.status(); });
  REQUIRE(answered.has_value());  // at once: the worker finished step 0
  CHECK(answered->ok());
}

TEST_CASE("pulled weights stay as pulled while later pushes apply (copy-on-write)", "[async]") {
  ServerOptions o = SyncOptions(1, 2);
  o.job.mode = Mode::kAsync;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
  o.staleness_lr = StalenessLr::kNone;         // and stale ones undamped
  TestCluster cluster(o);
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  ParameterServer* core = cluster.core(0);
  JobView view = o.job;
  view.layout_hash = LayoutHash(SmallLayout());
  absl::StatusOr<Registration> reg = core->Register(1, view, std::nullopt);
  REQUIRE(reg.ok());
  auto pull_key0 = [&] {
    std::shared_ptr<const std::vector<float>> weights;
    core->Pull(reg->session_id, 0, {{0, 0}}, wire::DTYPE_FLOAT32, false, absl::InfiniteFuture(),
               [&](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                 REQUIRE(chunks.ok());
                 weights = (*chunks)[0].weights;
               });
    REQUIRE(weights != nullptr);  // async pulls answer at once, on this thread
    return weights;
  };
  auto before = pull_key0();  // held, as a pull in flight holds it
  const std::weak_ptr<const std::vector<float>> first_buffer = before;
  REQUIRE(PushAll(*worker, 0, Filled(2)).ok());
  CHECK(*before == std::vector<float>(4, 0.0f));   // not written under the pull
  auto second = pull_key0();
  CHECK(*second == std::vector<float>(4, -2.0f));
  // The first pull is done: its buffer is the spare the next update writes
  // into while the second pull holds the current one. No new buffer.
  before.reset();
  REQUIRE(!first_buffer.expired());  // the server keeps it
  REQUIRE(PushAll(*worker, 1, Filled(2)).ok());
  CHECK(*second == std::vector<float>(4, -2.0f));
  const auto third = pull_key0();
  CHECK(*third == std::vector<float>(4, -4.0f));
  CHECK(third == first_buffer.lock());
}

TEST_CASE("the server flushes denormal values to zero when it applies a push", "[async]") {
  // Arithmetic on denormals is many times slower on x86 and their values are
  // far below any weight's precision: a denormal weight becomes exactly 0.
  ServerOptions o = SyncOptions(1, 1);
  o.job.mode = Mode::kAsync;
  TestCluster cluster(o);
  auto worker = cluster.Worker(0);
  const float denormal = 1e-39f;
  REQUIRE(std::fpclassify(denormal) == FP_SUBNORMAL);
  auto init = Zeros(SmallLayout());
  for (auto& t : init) std::fill(t.begin(), t.end(), denormal);
  REQUIRE(worker->Init(init).ok());
  REQUIRE(PushAll(*worker, 0, Zeros(SmallLayout())).ok());  // w -= lr * 0
  auto w = Filled(7);
  REQUIRE(PullAll(*worker, 1, w).ok());
  REQUIRE(AllEqual(w, 0.0f));
}

TEST_CASE("ssp: a pull waits for the slowest worker within the staleness bound", "[ssp]") {
  for (int staleness : {1, 0}) {
    DYNAMIC_SECTION("staleness " << staleness) {
      ServerOptions o = SyncOptions(2, 2);
      o.job.mode = Mode::kSsp;
      o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step: exact integers
      o.staleness_lr = StalenessLr::kNone;         // and stale ones undamped
      o.job.staleness = staleness;
      TestCluster cluster(o);
      auto fast = cluster.Worker(0);
      auto slow = cluster.Worker(1);
      REQUIRE(fast->Init(Zeros(SmallLayout())).ok());
      // The fast worker finishes steps 0..s, so its clock is s+1, and pulls
      // for step s+1: it needs the slowest clock >= 1.
      for (int t = 0; t <= staleness; ++t) REQUIRE(PushAll(*fast, t, Filled(1)).ok());
      auto w = Zeros(SmallLayout());
      // Applied at once, as in async.
      REQUIRE(cluster.core(0)->Stats().max_version == staleness + 1);
      absl::Notification pulled;
      absl::Status pull_status;
      fast->PullAsync(staleness + 1, {{0, w[0].data()}, {1, w[1].data()}}, [&](absl::Status s) {
        pull_status = s;
        pulled.Notify();
      });
      // Each server holds the pull of every key it owns (a request a key).
      for (int s = 0; s < 2; ++s) REQUIRE(AwaitWaitingPulls(cluster.core(s), cluster.core(s)->Stats().num_keys));
      REQUIRE(!pulled.HasBeenNotified());
      REQUIRE(PushAll(*slow, 0, Filled(1)).ok());  // slowest clock becomes 1
      REQUIRE(pulled.WaitForNotificationWithTimeout(absl::Seconds(10)));
      REQUIRE(pull_status.ok());
      REQUIRE(AllEqual(w, -static_cast<float>(staleness + 2)));  // not averaged
      // Within the bound a pull does not wait.
      REQUIRE(PullAll(*slow, 1, w).ok());
    }
  }
}

}  // namespace
}  // namespace shardps::testing
