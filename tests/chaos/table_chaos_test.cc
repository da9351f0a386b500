// The chaos case for sparse tables: 2 real ps_server processes and 2
// workers (PsClients driven in turn from this thread) train a table of rows
// by 64-bit id with AdaGrad. At step 7 or later, once both servers hold a
// checkpoint of step 4 or later, server 1 is killed with SIGKILL and
// started again on its port.
//  - sync: the workers get a rejoin status, register again, the job rewinds
//    to the checkpoint and replays; the final rows equal, bit for bit, those of
//    the same job run undisturbed.
//  - async: the workers register again and go on; every row is restored
//    (none reads as new) and the job ends.
// And with --replicas=2 (3 servers, sync): server 1 is killed and never
// started again; its backup serves its rows, no step is lost (no rejoin)
// and the final rows equal those of the undisturbed run, bit for bit. The
// same when server 1 then joins again (--join), is copied its rows, and
// server 2, which served them meanwhile, is killed.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <grpcpp/grpcpp.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ps_client.h"
#include "proto/shardps.grpc.pb.h"
#include "server/shard_checkpoint.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

constexpr int kSteps = 16, kKillAt = 7, kDim = 4;

Layout TableLayout() {
  Layout l{{{"w", {8}}}};
  TableSpec t;
  t.name = "emb";
  t.dim = kDim;
  t.init_scale = 0.1f;
  t.optimizer = RowOptimizerKind::kAdagrad;
  t.lr = 0.1f;
  l.tables.push_back(t);
  return l;
}

// Worker r's ids at step t: 6 of 40, overlapping the other worker's.
std::vector<int64_t> Ids(int r, int64_t t) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(((t * 7 + r * 3 + i * 5) % 40) * 1000003 - 20);
  return ids;
}

std::vector<float> Grads(int r, int64_t t) {
  std::vector<float> g(6 * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((r + 1) * ((t + i) % 5) - 2) / 4;
  return g;
}

class RowJob {
 public:
  RowJob(const std::string& mode, const std::string& dir, int servers = 2, int replicas = 1)
      : mode_(mode), dir_(dir), servers_count_(servers), replicas_(replicas) {
    for (int s = 0; s < servers; ++s) ports_.push_back(FreePort());
    servers_.resize(servers);
    for (int s = 0; s < servers; ++s) StartServer(s);
    ClientOptions o;
    o.job.mode = *ParseMode(mode);
    o.job.num_servers = servers;
    o.job.num_workers = 2;
    o.job.replicas = replicas;
    o.layout = TableLayout();
    o.server_timeout = absl::Seconds(20);
    o.failover_timeout = absl::Seconds(2);
    o.servers = Addresses();
    for (int r = 0; r < 2; ++r) {
      o.rank = r;
      auto c = PsClient::Connect(o);
      if (!c.ok() || !(*c)->Register().ok()) throw std::runtime_error("worker did not connect");
      workers_.push_back(*std::move(c));
    }
    if (!workers_[0]->Init({std::vector<float>(8, 0.0f)}).ok()) throw std::runtime_error("init failed");
  }

  // `join`: as ps_server --join=<every server's address> (re-replication).
  void StartServer(int s, bool join = false) {
    std::vector<std::string> flags{absl::StrCat("--port=", ports_[s]), absl::StrCat("--server_id=", s),
                                   absl::StrCat("--num_servers=", servers_count_), "--num_workers=2",
                                   absl::StrCat("--replicas=", replicas_), "--server_timeout_for_failover=2s",
                                   "--mode=" + mode_, "--optimizer=sgd", "--lr=0.01", "--checkpoint_dir=" + dir_,
                                   "--checkpoint_every=4", "--log_level=warn"};
    if (join) flags.push_back("--join=" + absl::StrJoin(Addresses(), ","));
    servers_[s] = std::make_unique<ServerProcess>(RunfilePath("server/ps_server"), flags);
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (int port : ports_) out.push_back(absl::StrCat("127.0.0.1:", port));
    return out;
  }
  // Waits (real time, up to 20 s) until server s answers a Join as a live
  // member of the job (a joining one answers that it has nothing yet).
  bool AwaitLive(int s) const {
    auto stub = wire::ParameterService::NewStub(
        grpc::CreateChannel(Addresses()[s], grpc::InsecureChannelCredentials()));
    for (const absl::Time deadline = absl::Now() + absl::Seconds(20); absl::Now() < deadline;) {
      wire::JoinRequest req;
      req.set_server_id((s + 1) % servers_count_);
      wire::JoinResponse resp;
      grpc::ClientContext ctx;
      if (stub->Join(&ctx, req, &resp).ok() && resp.initialized()) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  void KillServer(int s) { servers_[s]->Signal(SIGKILL); }

  // One step of both workers: rows, then the dense tensor (whose versions,
  // or in async the workers' clocks, the checkpoints follow). The first
  // error, a rejoin status first.
  absl::Status Step(int64_t t) {
    std::vector<float> dense(8, 0.5f);
    for (int r = 0; r < 2; ++r) {
      const std::vector<int64_t> ids = Ids(r, t);
      const std::vector<float> g = Grads(r, t);
      absl::Status s = workers_[r]->PushRows(t, 0, ids.data(), ids.size(), g.data());
      if (s.ok()) s = workers_[r]->Push(t, {{0, dense.data()}});
      if (s.ok() && mode_ != "sync") s = workers_[r]->Pull(t + 1, {{0, dense.data()}});
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> RegisterBoth() {
    absl::StatusOr<int64_t> a = workers_[0]->Register();
    absl::StatusOr<int64_t> b = workers_[1]->Register();
    if (!a.ok()) return a;
    if (!b.ok()) return b;
    return std::min(*a, *b);
  }
  PsClient& worker(int r) { return *workers_[r]; }

 private:
  const std::string mode_, dir_;
  const int servers_count_, replicas_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<PsClient>> workers_;
};

std::vector<int64_t> AllIds() {
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(i * 1000003LL - 20);
  return ids;
}

// Whether both servers hold a checkpoint of a step >= `step`.
bool HasCheckpointPast(const std::string& dir, int64_t step) {
  for (int s = 0; s < 2; ++s) {
    const std::vector<int64_t> steps = ListCheckpointSteps(dir, s, 2);
    if (steps.empty() || steps.back() < step) return false;
  }
  return true;
}

// Runs the job to kSteps, with server 1 killed once from step kKillAt on
// when `kill` (counted in `kills`); returns every row.
std::vector<float> Run(const std::string& mode, bool kill, int* rejoins, int* kills) {
  const std::string dir = TempDir("table-chaos-" + mode);
  RowJob job(mode, dir);
  for (int64_t t = 0; t < kSteps;) {
    const absl::Status s = job.Step(t);
    if (IsRejoin(s)) {
      ++*rejoins;
      absl::StatusOr<int64_t> at = job.RegisterBoth();
      INFO("after " << s.ToString() << ", registering again: " << at.status().ToString());
      REQUIRE(at.ok());
      t = *at;
      continue;
    }
    INFO("step " << t << ": " << s.ToString());
    REQUIRE(s.ok());
    ++t;
    // Paced as a real job's steps are, so that the servers' housekeeping
    // (every 20 ms) arms each checkpoint's capture before its step passes.
    absl::SleepFor(absl::Milliseconds(60));
    if (kill && t >= kKillAt && HasCheckpointPast(dir, 4)) {
      job.KillServer(1);
      job.StartServer(1);
      kill = false;  // once: the replay passes these steps again
      ++*kills;
      if (mode == "async") REQUIRE(job.RegisterBoth().ok());
    }
  }
  const std::vector<int64_t> ids = AllIds();
  std::vector<float> rows(ids.size() * kDim);
  REQUIRE(job.worker(0).PullRows(kSteps, 0, ids.data(), ids.size(), rows.data()).ok());
  return rows;
}

TEST_CASE("chaos (tables): sync survives a killed server with the exact rows of an undisturbed run",
          "[chaos][sparse]") {
  int rejoins = 0, kills = 0;
  const std::vector<float> calm = Run("sync", false, &rejoins, &kills);
  REQUIRE(rejoins == 0);
  const std::vector<float> broken = Run("sync", true, &rejoins, &kills);
  REQUIRE(kills == 1);
  CHECK(rejoins >= 1);
  CHECK(std::memcmp(calm.data(), broken.data(), calm.size() * 4) == 0);
}

// The replicated job: 3 servers, --replicas=2, sync. `kill`: server 1
// killed with SIGKILL at step kKillAt, never started again. `rejoin`: then
// started again with --join 3 steps later and, once it is live, server 2
// killed (it served server 1's rows meanwhile). Every row.
std::vector<float> RunReplicated(bool kill, bool rejoin, int* rejoins) {
  RowJob job("sync", TempDir(kill ? "table-chaos-replicated-kill" : "table-chaos-replicated"), 3, 2);
  for (int64_t t = 0; t < kSteps; ++t) {
    if (kill && t == kKillAt) job.KillServer(1);
    if (rejoin && t == kKillAt + 3) {
      job.StartServer(1, /*join=*/true);
      REQUIRE(job.AwaitLive(1));
      job.KillServer(2);
    }
    const absl::Status s = job.Step(t);
    if (IsRejoin(s)) ++*rejoins;
    INFO("step " << t << ": " << s.ToString());
    REQUIRE(s.ok());
  }
  const std::vector<int64_t> ids = AllIds();
  std::vector<float> rows(ids.size() * kDim);
  REQUIRE(job.worker(0).PullRows(kSteps, 0, ids.data(), ids.size(), rows.data()).ok());
  return rows;
}

TEST_CASE("chaos (tables, --replicas=2): sync loses no step to a server killed for good, rows exact",
          "[chaos][sparse][replication]") {
  int rejoins = 0;
  const std::vector<float> calm = RunReplicated(false, false, &rejoins);
  const std::vector<float> broken = RunReplicated(true, false, &rejoins);
  CHECK(rejoins == 0);
  CHECK(std::memcmp(calm.data(), broken.data(), calm.size() * 4) == 0);
  // Killed, joined again (copied its rows), then the other copy's server killed.
  const std::vector<float> rejoined = RunReplicated(true, true, &rejoins);
  CHECK(rejoins == 0);
  CHECK(std::memcmp(calm.data(), rejoined.data(), calm.size() * 4) == 0);
}

TEST_CASE("chaos (tables): async goes on after a killed server with its rows restored", "[chaos][sparse]") {
  int rejoins = 0, kills = 0;
  const std::vector<float> calm = Run("async", false, &rejoins, &kills);
  const std::vector<float> broken = Run("async", true, &rejoins, &kills);
  REQUIRE(kills == 1);
  // Rows that server 1 held at the checkpoint came back: had they been
  // lost, they would start again from their initial values and end far
  // from the undisturbed run's.
  const std::vector<int64_t> ids = AllIds();
  double largest = 0;
  for (size_t i = 0; i < calm.size(); ++i) largest = std::max(largest, std::abs(double{calm[i]} - broken[i]));
  CHECK(largest < 0.35);  // the steps between the checkpoint and the kill (at most 3 AdaGrad steps of 0.1)
  for (float x : broken) CHECK(std::isfinite(x));
}

}  // namespace
}  // namespace shardps::testing
