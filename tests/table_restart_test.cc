// A real ps_server holding a sparse table, killed with SIGKILL after a
// checkpoint and started again with the same flags, serves the
// checkpointed rows bit for bit, in sync, ssp and async, and training goes
// on from them.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/shard_checkpoint.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

Layout TableLayout() {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 8;
  t.init_scale = 0.1f;
  t.optimizer = RowOptimizerKind::kAdagrad;
  t.lr = 0.05f;
  l.tables.push_back(t);
  return l;
}

// Waits (the server's housekeeping writes it) for the checkpoint of `step`.
bool WaitForCheckpoint(const std::string& path, int64_t step) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(path);
    if (shard.ok() && shard->step == step) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_CASE("ps_server killed with SIGKILL serves its checkpointed table rows again", "[checkpoint][sparse][process]") {
  const std::string mode = GENERATE("sync", "ssp", "async");
  const std::string dir = TempDir("rows");
  const std::string binary = RunfilePath("server/ps_server");
  const std::vector<std::string> flags = {
      "--port=0", "--server_id=0", "--num_servers=1", "--num_workers=1", "--mode=" + mode, "--staleness=2",
      "--partition_bytes=16", "--optimizer=sgd", "--lr=0.01", "--checkpoint_dir=" + dir, "--checkpoint_every=4",
      "--log_level=warn"};
  const Layout layout = TableLayout();
  ClientOptions options;
  options.job = SyncOptions(1, 1).job;
  options.job.mode = *ParseMode(mode);
  options.job.staleness = 2;
  options.layout = layout;
  options.server_timeout = absl::Seconds(5);
  const std::vector<int64_t> ids = {5, -17, 1LL << 50, 99, 5};
  const std::vector<int64_t> unique = {5, -17, 1LL << 50, 99};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto grads = [&](size_t rows) {
    std::vector<float> g(rows * 8);
    for (float& x : g) x = dist(rng);
    return g;
  };
  auto dense = Zeros(layout);

  std::vector<float> before(unique.size() * 8);
  {
    ServerProcess server(binary, flags);
    options.servers = {absl::StrCat("127.0.0.1:", server.port())};
    auto client = PsClient::Connect(options);
    REQUIRE(client.ok());
    REQUIRE((*client)->Register().ok());
    REQUIRE((*client)->Init(Zeros(layout)).ok());
    for (int t = 0; t < 4; ++t) {
      const std::vector<float> g = grads(ids.size());
      REQUIRE((*client)->PushRows(t, 0, ids.data(), ids.size(), g.data()).ok());
      REQUIRE((*client)->Push(t, {{0, dense[0].data()}, {1, dense[1].data()}}).ok());
    }
    REQUIRE((*client)->PullRows(4, 0, unique.data(), unique.size(), before.data()).ok());
    REQUIRE(WaitForCheckpoint(ShardCheckpointPath(dir, 0, 1, 4), 4));
    REQUIRE(WIFSIGNALED(server.Signal(SIGKILL)));
  }

  ServerProcess restarted(binary, flags);
  options.servers = {absl::StrCat("127.0.0.1:", restarted.port())};
  auto client = PsClient::Connect(options);
  REQUIRE(client.ok());
  absl::StatusOr<int64_t> step = (*client)->Register();
  REQUIRE(step.ok());
  REQUIRE(*step == 4);
  std::vector<float> after(before.size(), -1);
  REQUIRE((*client)->PullRows(4, 0, unique.data(), unique.size(), after.data()).ok());
  CHECK(std::memcmp(before.data(), after.data(), before.size() * 4) == 0);

  // Training goes on from the restored rows and AdaGrad accumulators.
  const std::vector<float> g = grads(unique.size());
  REQUIRE((*client)->PushRows(4, 0, unique.data(), unique.size(), g.data()).ok());
  REQUIRE((*client)->Push(4, {{0, dense[0].data()}, {1, dense[1].data()}}).ok());
  std::vector<float> next(before.size());
  REQUIRE((*client)->PullRows(5, 0, unique.data(), unique.size(), next.data()).ok());
  for (size_t i = 0; i < next.size(); ++i) {
    CHECK(next[i] != after[i]);
    CHECK(std::abs(next[i] - after[i]) <= 0.05f * 1.0001f);  // AdaGrad moves an element by at most lr
  }
}

}  // namespace
}  // namespace shardps::testing
