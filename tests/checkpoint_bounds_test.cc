// A checkpoint's metadata sizes nothing past what the files hold: a layout
// past what a job may declare is refused when the file is read, and one
// that asks for more values than the shards hold (or optimizer slots of
// another length) is refused by a server's restore, the merge and the
// reshard, before any allocation it would size. Before, such a file
// aborted shardps_ckpt (std::length_error) or made a server allocate
// terabytes, and a short slot was resharded into zeros.
#include <catch2/catch.hpp>

#include <string>

#include "server/model_export.h"
#include "server/parameter_server.h"
#include "server/reshard.h"
#include "server/shard_checkpoint.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

ShardSnapshot Shard(const Layout& layout, int server_id = 0, int num_servers = 1) {
  ShardSnapshot s;
  s.server_id = server_id;
  s.num_servers = num_servers;
  s.layout = layout;
  s.partition_bytes = kSmallPartitionBytes;
  s.optimizer = "sgd";
  s.step = 4;
  return s;
}

// Server `id` of `n`'s keys of SmallLayout, `slots` optimizer slots each.
void AddKeys(ShardSnapshot& shard, int id, int n, int slots) {
  absl::StatusOr<KeyMap> map = KeyMap::Build(shard.layout, n, kSmallPartitionBytes);
  REQUIRE(map.ok());
  for (const ChunkInfo& c : map->chunks()) {
    if (c.server != id) continue;
    shard.keys.push_back({c.key, 4, std::vector<float>(c.length, 1.0f),
                          std::vector<std::vector<float>>(slots, std::vector<float>(c.length, 2.0f))});
  }
}

TEST_CASE("a layout past 2^40 values in a checkpoint's metadata: DATA_LOSS when read", "[checkpoint]") {
  const std::string dir = TempDir("huge-layout");
  const std::string path = ShardCheckpointPath(dir, 0, 1, 4);
  REQUIRE(WriteShardCheckpoint(path, Shard(Layout{{{"w", {int64_t{1} << 62}}}})).ok());
  absl::StatusOr<ShardSnapshot> read = ReadShardCheckpoint(path);
  CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("2^40") && Catch::Contains(path));
  CHECK(MergeShards(dir, std::nullopt).status().code() == absl::StatusCode::kDataLoss);  // not an abort
}

TEST_CASE("a layout of more values than the shards hold: refused by the merge, the reshard and a restore",
          "[checkpoint]") {
  const std::string dir = TempDir("layout-past-data");
  const Layout big{{{"w", {int64_t{1} << 39}}}};  // 2 TiB of float32, no key of it in the file
  const std::string path = ShardCheckpointPath(dir, 0, 1, 4);
  ShardSnapshot shard = Shard(big);
  shard.partition_bytes = int64_t{1} << 30;  // 2048 keys: the key map is small, the tensor not
  REQUIRE(WriteShardCheckpoint(path, shard).ok());
  absl::StatusOr<MergedModel> merged = MergeShards(dir, std::nullopt);
  CHECK(merged.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(merged.status().message()), Catch::Contains("no shard holds key") && Catch::Contains(dir));
  absl::StatusOr<int64_t> resharded = ReshardCheckpoint(dir, std::nullopt, 2, TempDir("layout-past-data-out"));
  CHECK(resharded.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(resharded.status().message()), Catch::Contains(dir));
}

TEST_CASE("a replicated job's checkpoint, each key in two shards, is no damage: it reshards", "[checkpoint]") {
  const std::string dir = TempDir("replicated"), out = TempDir("replicated-out");
  for (int s = 0; s < 2; ++s) {
    ShardSnapshot shard = Shard(SmallLayout(), s, 2);
    AddKeys(shard, s, 2, /*slots=*/1);
    AddKeys(shard, 1 - s, 2, /*slots=*/1);  // the keys it backs up (--replicas=2)
    REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir, s, 2, 4), shard).ok());
  }
  absl::StatusOr<int64_t> resharded = ReshardCheckpoint(dir, std::nullopt, 3, out);
  INFO(resharded.status().ToString());
  REQUIRE(resharded.ok());
  absl::StatusOr<MergedModel> merged = MergeShards(out, std::nullopt);
  REQUIRE(merged.ok());
  for (const std::vector<float>& t : merged->tensors) CHECK(t == std::vector<float>(t.size(), 1.0f));
}

TEST_CASE("a server's restore refuses a checkpoint whose layout gives it more than the file holds", "[checkpoint]") {
  const std::string dir = TempDir("restore-past-data");
  ShardSnapshot shard = Shard(Layout{{{"w", {int64_t{1} << 33}}}});  // 32 GiB of weights, none in the file
  shard.partition_bytes = 1 << 20;
  const std::string path = ShardCheckpointPath(dir, 0, 1, 4);
  REQUIRE(WriteShardCheckpoint(path, shard).ok());
  ServerOptions o = SyncOptions(1, 1);
  o.job.partition_bytes = shard.partition_bytes;
  o.checkpoint_dir = dir;
  ManualClock clock;
  absl::StatusOr<std::unique_ptr<ParameterServer>> core = ParameterServer::Create(o, &clock);
  REQUIRE(!core.ok());
  CHECK(core.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(core.status().message()), Catch::Contains("holds 0 keys of 0 values"));
  CHECK_THAT(std::string(core.status().message()), Catch::Contains(dir));
}

TEST_CASE("optimizer slots of another length or count: the reshard refuses them, naming the key", "[checkpoint]") {
  for (const char* damage : {"short", "long", "missing"}) {
    const std::string dir = TempDir(std::string("slots-") + damage);
    for (int s = 0; s < 2; ++s) {
      ShardSnapshot shard = Shard(SmallLayout(), s, 2);
      AddKeys(shard, s, 2, /*slots=*/2);
      if (s == 1) {
        std::vector<std::vector<float>>& slots = shard.keys.front().slots;  // a whole chunk of 4
        if (std::string(damage) == "short") slots[0].resize(slots[0].size() - 1);
        if (std::string(damage) == "long") slots[0].resize(slots[0].size() + 64, 3.0f);
        if (std::string(damage) == "missing") slots.pop_back();
      }
      REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir, s, 2, 4), shard).ok());
    }
    INFO(damage);
    absl::StatusOr<int64_t> resharded = ReshardCheckpoint(dir, std::nullopt, 3, TempDir("slots-out"));
    CHECK(resharded.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(resharded.status().message()), Catch::Contains("slot"));  // the key's, or the file's
  }
}

}  // namespace
}  // namespace shardps::testing
