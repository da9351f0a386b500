// Sync checkpoints of sparse tables on in-process servers (real gRPC on
// 127.0.0.1): a server of rows and no dense key labels its checkpoint on
// demand by its tables' step; a server of keys and rows waits for its
// tables, whose rows come after the keys' gradients, so that a checkpoint
// holds its step in both.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "server/shard_checkpoint.h"
#include "tests/checkpoints_on_demand.h"
#include "tests/sparse_test_rows.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// A sync server with rows and no dense key: its checkpoint on demand (and
// at shutdown) is labelled by the tables' step, as its periodic ones are,
// not as step 0 (which would have put trained rows under the job's first
// checkpoint, the one a rewind to step 0 reads).
TEST_CASE("sync: a checkpoint on demand of a server of rows only is labelled by the tables' step",
          "[checkpoint][sparse]") {
  ServerOptions o = SyncOptions(2, 1);
  o.checkpoint_dir = TempDir("rows-only-now");
  o.checkpoint_every_steps = 100;  // none is due: only the Init's and the one asked for
  o.checkpoint_on_shutdown = false;
  CheckpointsOnDemand servers(o);
  Layout layout;
  layout.tensors.push_back({"bias", {1}});  // one key, on one server
  layout.tables.push_back(ExactSpec(RowOptimizerKind::kSgd, 4));
  auto worker = servers.cluster.Worker(0, layout);
  REQUIRE(worker->Init(Zeros(layout)).ok());
  const int keyless = servers.cluster.core(0)->Stats().num_keys == 0 ? 0 : 1;
  REQUIRE(servers.cluster.core(keyless)->Stats().num_keys == 0);
  int64_t id = 0;
  while (RowServer(id, 2) != keyless) ++id;
  const std::vector<float> grad(4, 1.0f);
  const float bias_grad = 1.0f;
  for (int step = 0; step < 3; ++step) {
    REQUIRE(worker->Push(step, {{0, &bias_grad}}).ok());
    REQUIRE(worker->PushRows(step, 0, &id, 1, grad.data()).ok());
  }
  std::vector<float> row(4);
  REQUIRE(worker->PullRows(3, 0, &id, 1, row.data()).ok());  // every step applied
  const absl::StatusOr<std::string> path = servers.cluster.core(keyless)->CheckpointNow();
  INFO(path.status().ToString());
  REQUIRE(path.ok());
  absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(*path);
  REQUIRE(shard.ok());
  CHECK(shard->step == 3);
  REQUIRE(shard->tables.size() == 1);
  CHECK(shard->tables[0].version == 3);
  CHECK(shard->tables[0].ids == std::vector<int64_t>{id});
  const std::vector<int64_t> steps = servers.cluster.core(keyless)->Stats().checkpoint_steps;
  CHECK(steps == std::vector<int64_t>{0, 3});  // step 0's checkpoint is still the Init's
}

// Sync, keys and rows on one server: a worker pushes a step's rows after
// its dense gradients, so the keys can reach the checkpoint's step while a
// table is a step behind. The checkpoint waits for the table: it holds the
// step in both, as it is labelled.
TEST_CASE("sync: a checkpoint's sparse tables hold its step, though their rows come after the keys",
          "[checkpoint][sparse]") {
  ServerOptions o = SyncOptions(1, 1);
  o.checkpoint_dir = TempDir("tables-behind-keys");
  o.checkpoint_every_steps = 2;
  o.checkpoint_on_shutdown = false;
  CheckpointsOnDemand servers(o);
  Layout layout = SmallLayout();
  layout.tables.push_back(ExactSpec(RowOptimizerKind::kAdagrad, 4));
  auto worker = servers.cluster.Worker(0, layout);
  REQUIRE(worker->Init(Zeros(layout)).ok());
  const std::vector<int64_t> ids = {3, 9};
  const std::vector<float> grad(8, 0.5f);
  REQUIRE(PushAll(*worker, 0, Filled(1)).ok());
  REQUIRE(worker->PushRows(0, 0, ids.data(), ids.size(), grad.data()).ok());
  for (int i = 0; i < 5; ++i) {  // the housekeeping arms the checkpoint of step 2
    servers.clock.Advance(HostOptions().tick_interval);
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(PushAll(*worker, 1, Filled(1)).ok());  // the keys reach step 2; the table is at step 1
  for (int i = 0; i < 5; ++i) {
    servers.clock.Advance(HostOptions().tick_interval);
    absl::SleepFor(absl::Milliseconds(5));
  }
  CHECK(servers.cluster.core(0)->Stats().checkpoint_steps == std::vector<int64_t>{0});  // not yet written
  REQUIRE(worker->PushRows(1, 0, ids.data(), ids.size(), grad.data()).ok());
  std::vector<float> rows(8);
  REQUIRE(worker->PullRows(2, 0, ids.data(), ids.size(), rows.data()).ok());
  REQUIRE(servers.Reach(1, 2));
  absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(ShardCheckpointPath(o.checkpoint_dir, 0, 1, 2));
  REQUIRE(shard.ok());
  REQUIRE(shard->tables.size() == 1);
  CHECK(shard->tables[0].version == 2);
  std::map<int64_t, std::vector<float>> saved;
  for (size_t r = 0; r < shard->tables[0].ids.size(); ++r) {
    const float* row = shard->tables[0].rows.data() + r * 4;
    saved[shard->tables[0].ids[r]] = std::vector<float>(row, row + 4);
  }
  CHECK(saved[3] == std::vector<float>(rows.begin(), rows.begin() + 4));  // both steps' gradients
  CHECK(saved[9] == std::vector<float>(rows.begin() + 4, rows.end()));
}

}  // namespace
}  // namespace shardps::testing
