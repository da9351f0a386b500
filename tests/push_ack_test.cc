// DESIGN.md "Replication": with --replicas=2 a push of step t is answered
// only once the next copy of its keys (or tables) includes the worker's
// pushes up to step t - KeptPushSteps: in sync every step before t, in
// async the pushes of 4 steps before (rows: 6). A worker keeps that many
// steps of pushes, so they are all a failover can need, whether the worker
// pulls or not. A server core on a manual clock, with a replica link whose
// sends the test answers by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <list>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics_http.h"
#include "server/server_metrics.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

using Outcomes = absl::StatusOr<std::vector<wire::PushOutcome>>;

// Keeps every send until the test answers it, oldest first.
class HandLink final : public ReplicaLink {
 public:
  void SetPeers(const std::vector<std::string>&) override {}
  void Send(int, int, int64_t, std::vector<ReplicaUpdate>, std::function<void(absl::Status)> done) override {
    absl::MutexLock lock(&mu_);
    sends_.push_back(std::move(done));
  }
  void SendRows(int, int, int64_t, std::vector<RowsReplica>, std::function<void(absl::Status)> done) override {
    absl::MutexLock lock(&mu_);
    sends_.push_back(std::move(done));
  }
  // Answers the oldest send with `status`; false when none waits.
  bool AnswerOldest(const absl::Status& status = absl::OkStatus()) {
    std::function<void(absl::Status)> done;
    {
      absl::MutexLock lock(&mu_);
      if (sends_.empty()) return false;
      done = std::move(sends_.front());
      sends_.pop_front();
    }
    done(status);
    return true;
  }
  size_t waiting() {
    absl::MutexLock lock(&mu_);
    return sends_.size();
  }

 private:
  absl::Mutex mu_;
  std::list<std::function<void(absl::Status)>> sends_ ABSL_GUARDED_BY(mu_);
};

constexpr int kServers = 2;

Layout TableLayout() {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 2;
  l.tables.push_back(t);
  return l;
}

// Server 0 of 2 with --replicas=2 and one worker: it serves its own keys and
// rows and backs up server 1's; its copies go to server 1 through `link`.
class Server0 {
 public:
  explicit Server0(Mode mode) {
    ServerOptions o = SyncOptions(kServers, 1);
    o.job.mode = mode;
    o.job.replicas = 2;
    o.replica_link = &link_;
    auto core = ParameterServer::Create(o, &clock_);
    REQUIRE(core.ok());
    core_ = *std::move(core);
    JobView view = o.job;
    view.layout_hash = LayoutHash(TableLayout());
    auto reg = core_->Register(0, view, std::nullopt);
    REQUIRE(reg.ok());
    session_ = reg->session_id;
    std::vector<ChunkPayload> init;
    for (const ChunkInfo& c : map_.chunks()) init.push_back({c.key, wire::DTYPE_FLOAT32, {Floats(c.length, 0)}});
    REQUIRE(core_->Init(session_, TableLayout(), init).ok());
  }
  // A push of every key server 0 is primary of; its answer lands in *out.
  void Push(int64_t step, std::optional<Outcomes>* out) {
    std::vector<ChunkPayload> chunks;
    for (const ChunkInfo& c : map_.ChunksOfServer(0)) {
      chunks.push_back({c.key, wire::DTYPE_FLOAT32, {Floats(c.length, 1)}});
    }
    core_->Push(session_, step, chunks, clock_.Now() + absl::Seconds(1), [out](Outcomes o) { *out = std::move(o); });
  }
  // A push of rows of table 0 that hash to server 0.
  void PushRows(int64_t step, std::optional<Outcomes>* out) {
    std::vector<int64_t> ids;
    for (int64_t id = 0; ids.size() < 3; ++id) {
      if (RowServer(id, kServers) == 0) ids.push_back(id);
    }
    const absl::string_view id_bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
    core_->PushRows(session_, step, {{0, ids.size(), std::nullopt}},
                    RowPayload{Keep(id_bytes), Floats(static_cast<int64_t>(ids.size()) * 2, 1)},
                    clock_.Now() + absl::Seconds(1), [out](Outcomes o) { *out = std::move(o); });
  }
  // A pull of every key server 0 is primary of, for `step`; its answer lands in *out.
  void Pull(int64_t step, std::optional<absl::StatusOr<std::vector<PulledChunk>>>* out) {
    std::vector<ChunkKey> keys;
    for (const ChunkInfo& c : map_.ChunksOfServer(0)) keys.push_back(c.key);
    core_->Pull(session_, step, keys, wire::DTYPE_FLOAT32, /*after_own_push=*/false, clock_.Now() + absl::Seconds(1),
                [out](absl::StatusOr<std::vector<PulledChunk>> r) { *out = std::move(r); });
  }
  // Moves time on by `d` and runs the housekeeping tick.
  void Pass(absl::Duration d) {
    clock_.Advance(d);
    REQUIRE(core_->Heartbeat(session_).ok());
    core_->Tick();
  }
  ParameterServer& core() { return *core_; }
  HandLink& link() { return link_; }
  int64_t served_keys() const { return static_cast<int64_t>(map_.ChunksOfServer(0).size()); }

 private:
  absl::string_view Floats(int64_t n, float v) {
    buffers_.emplace_back(static_cast<size_t>(n) * 4, '\0');
    std::vector<float> values(n, v);
    std::memcpy(buffers_.back().data(), values.data(), buffers_.back().size());
    return buffers_.back();
  }
  absl::string_view Keep(absl::string_view bytes) {
    buffers_.emplace_back(bytes);
    return buffers_.back();
  }
  const KeyMap map_ = *KeyMap::Build(TableLayout(), kServers, kSmallPartitionBytes);
  HandLink link_;  // outlives the core, which calls it
  ManualClock clock_;
  std::unique_ptr<ParameterServer> core_;
  uint64_t session_ = 0;
  std::list<std::string> buffers_;
};

bool AllApplied(const std::optional<Outcomes>& o) {
  if (!o.has_value() || !o->ok() || (*o)->empty()) return false;
  for (wire::PushOutcome each : **o) {
    if (each != wire::PUSH_APPLIED) return false;
  }
  return true;
}

TEST_CASE("sync replicated: a push is acknowledged once the backup holds the steps before it", "[replication]") {
  Server0 s(Mode::kSync);
  std::optional<Outcomes> step0, step1, step2, step3, step4;
  s.Push(0, &step0);
  CHECK(AllApplied(step0));  // the backup holds version 0 (Init)
  CHECK(s.core().Stats().push_acks_held == 0);
  REQUIRE(s.link().waiting() == 1);  // step 0's copy, not answered yet

  s.Push(1, &step1);  // no pull in between
  CHECK_FALSE(step1.has_value());
  CHECK(s.core().Stats().push_acks_held == 1);
  REQUIRE(s.link().AnswerOldest());  // the backup has step 0
  CHECK(AllApplied(step1));

  SECTION("an acknowledgement the copy never gives fails at the push's deadline") {
    s.Push(2, &step2);  // step 1's copy is not answered
    s.Pass(absl::Milliseconds(500));
    CHECK_FALSE(step2.has_value());
    s.Pass(absl::Milliseconds(600));
    REQUIRE(step2.has_value());
    CHECK(step2->status().code() == absl::StatusCode::kDeadlineExceeded);
    CHECK_THAT(std::string(step2->status().message()), Catch::Contains("next copy"));
  }
  SECTION("a backup taken for failed releases it: the keys have one copy") {
    s.Push(2, &step2);
    CHECK_FALSE(step2.has_value());
    REQUIRE(s.link().AnswerOldest(absl::UnavailableError("no answer")));  // step 1's copy
    CHECK(AllApplied(step2));
    CHECK(s.core().Stats().under_replicated_keys > 0);
    s.Push(3, &step3);
    CHECK(AllApplied(step3));
  }
  SECTION("a shutdown answers it") {
    s.Push(2, &step2);
    s.core().Shutdown();
    REQUIRE(step2.has_value());
    CHECK(step2->status().code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("replicated: the keys awaiting their copy are counted until the backup acknowledges them, and exported",
          "[replication]") {
  Server0 s(Mode::kSync);
  auto metrics = MetricsEndpoint::Start("127.0.0.1:0", &s.core());
  REQUIRE(metrics.ok());
  const std::string line = "shardps_keys_awaiting_copy{server=\"0\"} ";
  const auto exported = [&] {  // the metric's line on the page, or "absent"
    const std::string page = ScrapeLoopbackMetrics((*metrics)->port());
    const size_t at = page.find(line);
    return at == std::string::npos ? std::string("absent") : page.substr(at, page.find('\n', at) - at);
  };
  CHECK(s.core().Stats().keys_awaiting_copy == 0);  // after Init every copy holds version 0
  CHECK(exported() == line + "0");
  std::optional<Outcomes> step0;
  s.Push(0, &step0);  // version 1 of every key server 0 serves; its copy not answered yet
  REQUIRE(AllApplied(step0));
  CHECK(s.core().Stats().keys_awaiting_copy == s.served_keys());
  CHECK(exported() == absl::StrCat(line, s.served_keys()));
  REQUIRE(s.link().AnswerOldest());
  CHECK(s.core().Stats().keys_awaiting_copy == 0);
  CHECK(exported() == line + "0");
}

TEST_CASE("sync replicated: a push of rows is acknowledged once the table's copy holds the steps before it",
          "[replication][sparse]") {
  Server0 s(Mode::kSync);
  std::optional<Outcomes> step0, step1, step2;
  s.PushRows(0, &step0);
  CHECK(AllApplied(step0));
  REQUIRE(s.link().waiting() == 1);
  s.PushRows(1, &step1);
  CHECK_FALSE(step1.has_value());
  CHECK(s.core().Stats().push_acks_held == 1);
  REQUIRE(s.link().AnswerOldest());
  CHECK(AllApplied(step1));
  s.PushRows(2, &step2);
  s.Pass(absl::Milliseconds(1100));
  REQUIRE(step2.has_value());
  CHECK(step2->status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("async replicated: a push is answered once the backup includes the worker's pushes of 4 steps before",
          "[replication]") {
  Server0 s(Mode::kAsync);
  std::vector<std::optional<Outcomes>> dense(5);
  for (int t = 0; t < 4; ++t) {
    s.Push(t, &dense[t]);
    CHECK(AllApplied(dense[t]));  // the worker keeps these four: nothing to wait for
  }
  s.Push(4, &dense[4]);
  CHECK_FALSE(dense[4].has_value());  // the copy has none of the worker's pushes yet
  CHECK(s.core().Stats().push_acks_held == 1);
  REQUIRE(s.link().AnswerOldest());  // step 0's push reached the copy
  CHECK(AllApplied(dense[4]));

  // Rows: two steps more.
  std::vector<std::optional<Outcomes>> rows(7);
  for (int t = 0; t < 6; ++t) {
    s.PushRows(t, &rows[t]);
    CHECK(AllApplied(rows[t]));
  }
  s.PushRows(6, &rows[6]);
  CHECK_FALSE(rows[6].has_value());
  int answered = 0;
  while (!rows[6].has_value() && s.link().AnswerOldest()) ++answered;
  CHECK(AllApplied(rows[6]));
  CHECK(answered == 5);  // the dense copies of steps 1-4, then the rows of step 0
}

// Init sets version 0 as acknowledged (every copy is given it); the weights
// a pull reads under that version must be version 0's, not a later push's.
TEST_CASE("async replicated: until the backup acknowledges a push, pulls read the acknowledged weights",
          "[replication]") {
  Server0 server(Mode::kAsync);
  std::optional<Outcomes> pushed;
  server.Push(0, &pushed);  // applied at once; its copy waits in the link
  REQUIRE(AllApplied(pushed));
  REQUIRE(server.link().waiting() >= 1);
  auto pull = [&] {  // server 0's keys for step 1, answered at once (async)
    std::optional<absl::StatusOr<std::vector<PulledChunk>>> pulled;
    server.Pull(1, &pulled);
    REQUIRE(pulled.has_value());
    REQUIRE(pulled->ok());
    return **std::move(pulled);
  };
  auto zero = [](float x) { return x == 0.0f; };
  for (const PulledChunk& c : pull()) {
    CHECK(c.version == 0);
    CHECK(std::all_of(c.weights->begin(), c.weights->end(), zero));
  }
  while (server.link().AnswerOldest()) {
  }
  for (const PulledChunk& c : pull()) {
    CHECK(c.version == 1);
    CHECK(std::none_of(c.weights->begin(), c.weights->end(), zero));
  }
}

}  // namespace
}  // namespace shardps::testing
