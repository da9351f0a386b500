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

// Ids on both servers (RowServer spreads them).
const std::vector<int64_t> kIds = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};

std::vector<float> GradsOf(int64_t step) {
  std::vector<float> g(kIds.size() * 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.25f * static_cast<float>((i + step) % 5) - 0.5f;
  return g;
}

void RequireOk(const absl::Status& s) {
  INFO(s.ToString());
  REQUIRE(s.ok());
}

std::vector<float> PullRows(PsClient& worker, int64_t step) {
  std::vector<float> rows(kIds.size() * 4);
  RequireOk(worker.PullRows(step, 0, kIds.data(), kIds.size(), rows.data()));
  return rows;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_CASE("replication of rows: after a rewind each copy holds its primary's rows of the rewound step",
          "[replication][sparse][recovery]") {
  const Mode mode = GENERATE(Mode::kSync, Mode::kSsp);
  const int killed = GENERATE(0, 1);
  INFO(ModeName(mode) << ": server " << killed << " killed after the rewind");
  ServerOptions o = CrashingServers(mode, 2, 1, TempDir("rewind-replicas"));
  o.job.replicas = 2;
  CheckpointsOnDemand servers(o);
  TestCluster& cluster = servers.cluster;
  auto worker = cluster.Worker(0, TableLayout());
  RequireOk(worker->Init(Zeros(TableLayout())));
  std::vector<float> at4;
  std::vector<std::vector<float>> dense4 = Zeros(SmallLayout());
  for (int64_t step = 0; step < 6; ++step) {  // steps 4 and 5 are left behind by the rewind
    RequireOk(PushAll(*worker, step, Filled(1)));
    RequireOk(worker->PushRows(step, 0, kIds.data(), kIds.size(), GradsOf(step).data()));
    if (step == 3) {
      at4 = PullRows(*worker, 4);
      RequireOk(PullAll(*worker, 4, dense4));
      REQUIRE(servers.Reach(2, 4));
    }
  }
  REQUIRE(!Bitwise(PullRows(*worker, 6), at4));
  cluster.Restart(1);  // it restores step 4 and awaits a rewind; server 0 is at step 6
  REQUIRE(IsRejoin(PushAll(*worker, 6, Filled(1))));
  REQUIRE(worker->Register().value() == 4);
  REQUIRE(cluster.core(0)->Stats().timeline == 1);

  // A pull waits for the copy to acknowledge what it reads: here, the rows
  // each primary sent again after the rewind.
  CHECK(Bitwise(PullRows(*worker, 4), at4));
  cluster.Kill(killed);
  // Every row and key from the copy of the server left, none redone there
  // from the pushes the worker kept of the steps left behind.
  CHECK(Bitwise(PullRows(*worker, 4), at4));
  std::vector<std::vector<float>> dense = Zeros(SmallLayout());
  RequireOk(PullAll(*worker, 4, dense));
  CHECK(dense == dense4);
  CHECK(cluster.core(1 - killed)->Stats().view.Failed(killed));

  // An update queued on the timeline left behind is refused, and changes nothing.
  RowsReplica old{killed, 0, 3, 8, std::make_shared<const std::vector<int64_t>>(1, kIds[0]),
                  std::make_shared<const std::vector<float>>(8, 9.0f), {2}};
  const absl::Status refused = cluster.core(1 - killed)->ApplyRowsReplica(killed, 0, {old});
  CHECK(refused.code() == absl::StatusCode::kAborted);
  CHECK(Bitwise(PullRows(*worker, 4), at4));
}

}  // namespace
}  // namespace shardps::testing
