// A rewind in a replicated job (--replicas=2, sync and ssp): a copy keeps no
// checkpoint of its primary's rows, so the rewind empties it and the
// primary sends its rows again, whole; replication carries the timeline, so
// an update of the timeline left behind is refused (ABORTED) where the job
// has moved on; and a worker drops the pushes it kept for a failover
// (client/failover.h) when the job rewinds. After the rewind either server
// can be killed and its rows and keys are served by the other as they were
// at the rewound step, bit for bit.
// Real gRPC on 127.0.0.1 between workers and servers and between servers.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <vector>

#include "tests/checkpoints_on_demand.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

Layout TableLayout() {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 4;
  t.init_scale = 0.1f;  // rows start from their id's hash: a copy made anew would differ
  t.optimizer = RowOptimizerKind::kAdagrad;
  t.lr = 0.5f;
  l.tables.push_back(t);
  return l;
}

// Ids on both servers (RowServer spreads them), pushed at every step; and
// one more at steps 4 and 5 only, which no server holds at step 4.
const std::vector<int64_t> kIds = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
std::vector<int64_t> IdsOf(int64_t step) {
  std::vector<int64_t> ids = kIds;
  if (step >= 4) ids.push_back(1000 + step);
  return ids;
}
const std::vector<int64_t> kAllIds = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 1004, 1005};

std::vector<float> GradsOf(int64_t step, size_t n) {
  std::vector<float> g(n * 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>((i + step) % 5) - 0.5f;
  return g;
}

void RequireOk(const absl::Status& s) {
  INFO(s.ToString());
  REQUIRE(s.ok());
}

std::vector<float> PullRows(PsClient& worker, int64_t step, const std::vector<int64_t>& ids = kIds) {
  std::vector<float> rows(ids.size() * 4);
  RequireOk(worker.PullRows(step, 0, ids.data(), ids.size(), rows.data()));
  return rows;
}

void Step(PsClient& worker, int64_t step) {
  RequireOk(PushAll(worker, step, Filled(1)));
  const std::vector<int64_t> ids = IdsOf(step);
  RequireOk(worker.PushRows(step, 0, ids.data(), ids.size(), GradsOf(step, ids.size()).data()));
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

ServerOptions Options(Mode mode, const std::string& dir) {
  ServerOptions o = CrashingServers(mode, 2, 1, TempDir(dir));
  o.job.replicas = 2;
  return o;
}

struct Weights {
  std::vector<float> rows;
  std::vector<std::vector<float>> dense = Zeros(SmallLayout());
};

Weights PullAt(PsClient& worker, int64_t step) {
  Weights w;
  w.rows = PullRows(worker, step);
  RequireOk(PullAll(worker, step, w.dense));
  return w;
}

// The reference: steps 0-4 with no restart, rewind or kill; the weights of step 5.
Weights Undisturbed(Mode mode) {
  CheckpointsOnDemand servers(Options(mode, "rewind-replicas-calm"));
  auto worker = servers.cluster.Worker(0, TableLayout());
  RequireOk(worker->Init(Zeros(TableLayout())));
  for (int64_t step = 0; step < 5; ++step) Step(*worker, step);
  return PullAt(*worker, 5);
}

TEST_CASE("replication of rows: after a rewind each copy holds its primary's rows of the rewound step",
          "[replication][sparse][recovery]") {
  const Mode mode = GENERATE(Mode::kSync, Mode::kSsp);
  const int killed = GENERATE(0, 1);
  INFO(ModeName(mode) << ": server " << killed << " killed after the rewind");
  const Weights calm = Undisturbed(mode);
  CheckpointsOnDemand servers(Options(mode, "rewind-replicas"));
  TestCluster& cluster = servers.cluster;
  auto worker = cluster.Worker(0, TableLayout());
  RequireOk(worker->Init(Zeros(TableLayout())));
  Weights at4;
  for (int64_t step = 0; step < 6; ++step) {  // steps 4 and 5 are left behind by the rewind
    Step(*worker, step);
    if (step == 3) {
      at4 = PullAt(*worker, 4);
      REQUIRE(servers.Reach(2, 4));
    }
  }
  const std::vector<float> left_behind = PullRows(*worker, 6, kAllIds);
  cluster.Restart(1);  // it restores step 4 and awaits a rewind; server 0 is at step 6
  REQUIRE(IsRejoin(PushAll(*worker, 6, Filled(1))));
  REQUIRE(worker->Register().value() == 4);
  REQUIRE(cluster.core(0)->Stats().timeline == 1);

  // A pull waits for the copy to acknowledge what it reads: here, the rows
  // each primary sent again after the rewind. Rows 1004 and 1005 are new
  // again (made now, as they were before step 4).
  const std::vector<float> rewound = PullRows(*worker, 4, kAllIds);
  CHECK(Bitwise(PullRows(*worker, 4), at4.rows));
  CHECK(!Bitwise(rewound, left_behind));
  cluster.Kill(killed);
  // Every row and key from the copy of the server left: none of the steps
  // left behind there (emptied in the rewind, then sent again), none redone
  // from the pushes the worker kept for a failover.
  CHECK(Bitwise(PullRows(*worker, 4, kAllIds), rewound));
  const Weights from_copy = PullAt(*worker, 4);
  CHECK(Bitwise(from_copy.rows, at4.rows));
  CHECK(from_copy.dense == at4.dense);
  CHECK(cluster.core(1 - killed)->Stats().view.Failed(killed));

  // An update queued on the timeline left behind is refused, and changes nothing.
  RowsReplica old{killed, 0, 3, 8, std::make_shared<const std::vector<int64_t>>(1, kIds[0]),
                  std::make_shared<const std::vector<float>>(8, 9.0f), {2}};
  const absl::Status refused = cluster.core(1 - killed)->ApplyRowsReplica(killed, 0, {old});
  CHECK(refused.code() == absl::StatusCode::kAborted);

  // Step 4 again, on the copy: taken (not a duplicate of the steps left
  // behind), and the weights are those of a run that never left step 4.
  Step(*worker, 4);
  const Weights at5 = PullAt(*worker, 5);
  CHECK(Bitwise(at5.rows, calm.rows));
  CHECK(at5.dense == calm.dense);
}

// A copy emptied by a rewind whose primary fails before sending its rows
// again answers DATA_LOSS, naming the server, instead of new rows. Here the
// test rewinds server 1 alone, so server 0's rows never come again.
TEST_CASE("replication of rows: a copy emptied by a rewind answers DATA_LOSS until its primary's rows come again",
          "[replication][sparse][recovery]") {
  const ServerOptions o = Options(Mode::kSync, "rewind-data-loss");
  CheckpointsOnDemand servers(o);
  auto worker = servers.cluster.Worker(0, TableLayout());
  RequireOk(worker->Init(Zeros(TableLayout())));  // writes the checkpoint of step 0
  Step(*worker, 0);
  ParameterServer& one = *servers.cluster.core(1);
  const absl::StatusOr<RewindResult> rewound = one.Rewind(0, 1, {RestartedServer{0, 1}});
  REQUIRE(rewound.ok());
  REQUIRE(rewound->rewound);
  ServerView failed;
  failed.MarkFailed(0);
  one.NoteView(failed);  // server 1 serves server 0's rows from now on
  JobView view = o.job;
  view.layout_hash = LayoutHash(TableLayout());
  const absl::StatusOr<Registration> reg = one.Register(0, view, std::nullopt);
  REQUIRE(reg.ok());
  int64_t id = 0;
  while (RowServer(id, 2) != 0) ++id;
  std::optional<absl::Status> pulled;
  one.PullRows(reg->session_id, 0, {SparseStore::Part{0, 1, 0}},
               absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id)), absl::Now() + absl::Seconds(10),
               [&](absl::StatusOr<std::vector<PulledRows>> rows) { pulled = rows.status(); });
  REQUIRE(pulled.has_value());
  CHECK(pulled->code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(pulled->message()), Catch::Contains("the rows of server 0 are lost"));
}

}  // namespace
}  // namespace shardps::testing
