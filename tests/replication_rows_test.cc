// DESIGN.md "Replication" for sparse tables (--replicas=2, sync): each
// server's rows have a copy on the next server, updated after every step
// before any worker reads it; a killed server's rows are served by that copy
// with no step lost and the rows of a run without the kill, bit for bit.
// Real gRPC on 127.0.0.1 between workers and servers and between servers.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common/tensor_frame.h"
#include "tests/expect_status.h"
#include "tests/lockstep_training.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

constexpr int kServers = 3;
constexpr int kWorkers = 2;
constexpr int kSteps = 6;

// Sync: AdaGrad (slots the copy must have too) over rows that start from
// their id's hash (the copy must not make them anew). Async: SGD at lr 1
// from zero, so that a row ends at minus the sum of its gradients, exactly
// (they are multiples of 1/4), in any order: a push lost or applied twice
// shows.
Layout TableLayout(Mode mode = Mode::kSync) {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 4;
  t.init_scale = mode == Mode::kSync ? 0.1f : 0.0f;
  t.optimizer = mode == Mode::kSync ? RowOptimizerKind::kAdagrad : RowOptimizerKind::kSgd;
  t.lr = mode == Mode::kSync ? 0.5f : 1.0f;
  l.tables.push_back(t);
  return l;
}

ServerOptions ReplicatedOptions(Mode mode = Mode::kSync) {
  ServerOptions o = SyncOptions(kServers, kWorkers);
  o.job.mode = mode;
  o.job.replicas = 2;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // async: every push a whole step
  return o;
}

// The ids worker `rank` touches at `step`: some shared, some its own, one
// named twice, spread over every server.
std::vector<int64_t> IdsOf(int rank, int64_t step) {
  return {step % 5, 11 + rank, 1000 + step, 7919 * (rank + 1), step % 5, 123456789 + 3 * step + rank};
}

std::vector<float> RowGradsOf(int rank, int64_t step, size_t n) {
  std::vector<float> g(n * 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>((rank + 1) * (i + 1) % 7) - 0.5f * (step % 3);
  return g;
}

// Every id either worker ever touched, pulled at the end.
std::vector<int64_t> AllIds() {
  std::vector<int64_t> all;
  for (int r = 0; r < kWorkers; ++r) {
    for (int64_t s = 0; s < kSteps; ++s) {
      for (int64_t id : IdsOf(r, s)) all.push_back(id);
    }
  }
  return all;
}

void RequireOk(const absl::Status& s) {
  INFO(s.ToString());
  REQUIRE(s.ok());
}

struct Trained {
  std::vector<std::vector<float>> dense;
  std::vector<float> rows;
};

// kSteps steps of both workers: each pushes its dense gradient and its rows,
// then both pull the dense weights and their rows of the next step. The
// events of a step run after worker 0's pushes and before worker 1's.
Trained Train(TestCluster& cluster, const StepEvents& events, Mode mode = Mode::kSync) {
  std::vector<std::unique_ptr<PsClient>> w;
  for (int r = 0; r < kWorkers; ++r) w.push_back(cluster.Worker(r, TableLayout(mode)));
  REQUIRE(w[0]->Init(Zeros(TableLayout(mode))).ok());
  std::vector<std::vector<std::vector<float>>> dense(kWorkers, Zeros(TableLayout(mode)));
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorkers; ++r) {
      if (auto e = events.find(step); e != events.end() && r == 1) e->second();
      const std::vector<int64_t> ids = IdsOf(r, step);
      const std::vector<float> grads = RowGradsOf(r, step, ids.size());
      INFO("worker " << r << " step " << step);
      RequireOk(PushAll(*w[r], step, GradientOf(r, step)));
      RequireOk(w[r]->PushRows(step, 0, ids.data(), ids.size(), grads.data()));
    }
    for (int r = 0; r < kWorkers; ++r) {
      INFO("worker " << r << " step " << step);
      RequireOk(PullAll(*w[r], step + 1, dense[r]));
      const std::vector<int64_t> ids = IdsOf(r, step + 1);
      std::vector<float> rows(ids.size() * 4);
      RequireOk(w[r]->PullRows(step + 1, 0, ids.data(), ids.size(), rows.data()));
    }
  }
  Trained out{dense[0], {}};
  const std::vector<int64_t> all = AllIds();
  out.rows.resize(all.size() * 4);
  RequireOk(w[1]->PullRows(kSteps, 0, all.data(), all.size(), out.rows.data()));
  return out;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_CASE("replication of rows: a killed server costs no step and changes no bit of the rows",
          "[replication][sparse]") {
  // With admission at the third push too: the backup counts, as the
  // primary does, the ids it has not stored yet.
  const int admit = GENERATE(0, 3);
  INFO("--row_admit_count=" << admit);
  ServerOptions options = ReplicatedOptions();
  options.row_admit_count = admit;
  Trained calm;
  {
    TestCluster cluster(options);
    calm = Train(cluster, {});
    for (int s = 0; s < kServers; ++s) {
      const ServerStats st = cluster.core(s)->Stats();
      INFO("server " << s);
      CHECK(st.replica_bytes_sent > 0);  // rows (and keys) went to the backup
      REQUIRE(st.tables.size() == 1);
      CHECK(st.tables[0].version == kSteps);
    }
  }
  for (int killed : {0, 1}) {
    for (int at : {0, 3}) {
      INFO("server " << killed << " killed at step " << at);
      TestCluster cluster(options);
      const Trained t = Train(cluster, {{at, [&] { cluster.Kill(killed); }}});
      CHECK(Bitwise(t.rows, calm.rows));
      CHECK(t.dense == calm.dense);
      CHECK(cluster.core((killed + 1) % kServers)->Stats().view.Failed(killed));
    }
  }
}

// A session of worker 1 on server s, registered as a worker would.
uint64_t SessionOn(TestCluster& cluster, int s) {
  wire::RegisterRequest reg;
  reg.set_rank(1);
  JobView v = ReplicatedOptions().job;
  v.layout_hash = LayoutHash(TableLayout());
  *reg.mutable_view() = JobViewToProto(v);
  wire::RegisterResponse resp;
  grpc::ClientContext ctx;
  REQUIRE(cluster.RawStub(s)->Register(&ctx, reg, &resp).ok());
  return resp.session_id();
}

TEST_CASE("replication of rows: a killed server joins again, is copied its rows, and then the other copy can go",
          "[replication][sparse]") {
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    INFO(ModeName(mode));
    Trained calm;
    {
      TestCluster cluster(ReplicatedOptions(mode));
      calm = Train(cluster, {}, mode);
    }
    TestCluster cluster(ReplicatedOptions(mode));
    const Trained t = Train(cluster,
                            {{1, [&] { cluster.Kill(1); }},
                             {2,
                              [&] {
                                cluster.RestartJoining(1);
                                REQUIRE(AwaitLive(cluster, 1, {0, 1, 2}));
                              }},
                             {4, [&] { cluster.Kill(2); }}},
                            mode);
    // Server 2's rows are served by server 0 now, server 1's by server 1
    // (from the copy it was given, and the updates since): nothing lost.
    CHECK(Bitwise(t.rows, calm.rows));
    CHECK(cluster.core(0)->Stats().view.Failed(2));
  }
}

TEST_CASE("replication of rows: a backup refuses rows while their primary serves them", "[replication][sparse]") {
  TestCluster cluster(ReplicatedOptions());
  auto worker = cluster.Worker(0, TableLayout());
  REQUIRE(worker->Init(Zeros(TableLayout())).ok());
  int64_t id = 0;
  while (RowServer(id, kServers) != 0) ++id;
  // A pull of row `id` (server 0's) from server s, naming `primary`.
  const auto pull = [&](int s, int primary = 0) {
    wire::PullRowsRequest req;
    req.set_session_id(SessionOn(cluster, s));
    req.set_step(0);
    req.set_ids(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    wire::RowsPart* part = req.add_parts();
    part->set_table(0);
    part->set_ids(1);
    part->set_primary(primary);
    wire::PullRowsResponse resp;
    grpc::ClientContext ctx;
    return cluster.RawStub(s)->PullRows(&ctx, req, &resp);
  };
  CHECK(pull(0).ok());
  // Server 1 backs server 0's rows up: refused UNAVAILABLE (a worker retries,
  // or goes to whoever serves them).
  Expect(pull(1), grpc::StatusCode::UNAVAILABLE, "does not serve the rows of server 0");
  // Server 2 holds no copy of them at all; no server is -1 or 7.
  Expect(pull(2), grpc::StatusCode::INVALID_ARGUMENT, "holds no copy of the rows of server 0");
  Expect(pull(0, -1), grpc::StatusCode::INVALID_ARGUMENT, "holds no copy of the rows of server -1");
  Expect(pull(0, 7), grpc::StatusCode::INVALID_ARGUMENT, "holds no copy of the rows of server 7");
}

TEST_CASE("replication of rows: a raw Replicate frame of rows that does not add up is refused, a good one installed",
          "[replication][sparse]") {
  TestCluster cluster(ReplicatedOptions());
  auto worker = cluster.Worker(0, TableLayout());
  REQUIRE(worker->Init(Zeros(TableLayout())).ok());
  int64_t id = 0;
  while (RowServer(id, kServers) != 0) ++id;  // server 1 keeps the copy of its row
  const std::string ids(reinterpret_cast<const char*>(&id), sizeof(id));
  std::vector<float> row(8);  // adagrad, dim 4: the row, then its 4 sums of squares
  for (size_t i = 0; i < row.size(); ++i) row[i] = 0.25f * static_cast<float>(i + 1);
  const std::string values(reinterpret_cast<const char*>(row.data()), row.size() * 4);
  // A frame from server 0 of one row of `primary`'s, `count` and `floats` declared.
  // `admission`: its admission counts (none: the row is stored).
  auto frame = [&](int primary, int64_t count, int floats, absl::string_view payload = {},
                   std::vector<int32_t> admission = {}) {
    wire::ReplicateRequest req;
    req.set_from_server(0);
    wire::ReplicaRows* r = req.add_rows();
    r->set_primary(primary);
    r->set_table(0);
    r->set_version(5);
    r->set_count(count);
    r->set_row_floats(floats);
    for (int32_t a : admission) r->add_admission(a);
    return EncodeFrame(req, {ids, payload.empty() ? absl::string_view(values) : payload});  // borrowed
  };
  auto refused = [&](const grpc::ByteBuffer& f, const char* why) {
    Expect(cluster.RawCall(1, kRawReplicateMethod, f), grpc::StatusCode::INVALID_ARGUMENT, why);
  };
  refused(frame(0, 2, 8), "need count");          // more declared than sent
  refused(frame(0, 1, 6), "the frame carries");   // less declared than sent
  refused(frame(0, -1, 8), "need count");
  refused(frame(0, 1, 0), "row_floats");
  refused(frame(0, 1, 4, absl::string_view(values).substr(0, 16)), "the table's rows have 8");  // rows of 4 floats
  refused(frame(2, 1, 8), "does not back up");         // server 1 keeps no copy of server 2's rows
  refused(frame(0, 1, 8, {}, {1, 1}), "admission counts");  // two counts for one id
  refused(frame(0, 1, 8, {}, {-2}), "admission counts");     // neither stored (-1) nor a count
  // One that adds up is installed: once server 0 is gone, its copy answers with it.
  REQUIRE(cluster.RawCall(1, kRawReplicateMethod, frame(0, 1, 8)).ok());
  cluster.Kill(0);
  std::vector<float> pulled(4);
  const absl::Status s = worker->PullRows(5, 0, &id, 1, pulled.data());
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(pulled == std::vector<float>(row.begin(), row.begin() + 4));
}

TEST_CASE("replication of rows: async and ssp lose no row push and apply none twice when a server is killed",
          "[replication][sparse]") {
  for (Mode mode : {Mode::kAsync, Mode::kSsp}) {
    Trained calm;
    {
      TestCluster cluster(ReplicatedOptions(mode));
      calm = Train(cluster, {}, mode);
    }
    for (int killed : {0, 1}) {
      INFO(ModeName(mode) << ": server " << killed << " killed at step 3");
      TestCluster cluster(ReplicatedOptions(mode));
      const Trained t = Train(cluster, {{3, [&] { cluster.Kill(killed); }}}, mode);
      CHECK(Bitwise(t.rows, calm.rows));  // each row minus the sum of its gradients, exactly
      CHECK(cluster.core((killed + 1) % kServers)->Stats().view.Failed(killed));
    }
  }
}

}  // namespace
}  // namespace shardps::testing
