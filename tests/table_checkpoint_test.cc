// Sparse tables in checkpoints: a shard file holds each table's ids, rows
// and optimizer slots bit for bit; a restore keeps the rows that hash to
// this server whatever the server count the checkpoint came from; the merge
// tool writes "<table>.ids" and "<table>.rows"; a checkpoint resharded
// for another server count holds the same model; a restore empties each
// table in place. Sync checkpoints of a cluster's tables:
// tests/table_checkpoint_sync_test.cc. A real server restarted
// after SIGKILL: tests/table_restart_test.cc.
#include <catch2/catch.hpp>


#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/model_export.h"
#include "server/reshard.h"
#include "server/safetensors.h"
#include "server/shard_checkpoint.h"
#include "server/sparse/sparse_store.h"
#include "tests/sparse_test_rows.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

TableSpec Table(RowOptimizerKind kind) {
  TableSpec t;
  t.name = "emb";
  t.dim = 4;
  t.init_scale = 0.1f;
  t.optimizer = kind;
  t.lr = 0.1f;
  return t;
}

std::unique_ptr<SparseStore> Store(const TableSpec& spec, int server_id = 0, int num_servers = 1) {
  SparseStoreOptions o = LiveStoreOptions(Mode::kAsync, 1);
  o.server_id = server_id;
  o.num_servers = num_servers;
  auto store = std::make_unique<SparseStore>(o);
  store->Install({spec});
  return store;
}

// Pushes a gradient of (id % 7 + 1) / 8 to every element of ids' rows.
void Train(SparseStore& store, const std::vector<int64_t>& ids) {
  std::vector<float> g;
  for (int64_t id : ids) g.insert(g.end(), 4, static_cast<float>(id % 7 + 1) / 8);
  REQUIRE(store.Push(0, 0, 0, RowPayload{Bytes(ids), Bytes(g), wire::DTYPE_FLOAT32}).ok());
}

std::vector<float> Rows(SparseStore& store, const std::vector<int64_t>& ids) {
  std::optional<absl::StatusOr<PulledRows>> got;
  store.Pull(0, 0, 0, Bytes(ids), absl::InfiniteFuture(), [&](absl::StatusOr<PulledRows> r) { got = std::move(r); });
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  return (*got)->rows;
}

ShardSnapshot Shard(const TableSpec& spec, std::vector<TableSnapshot> tables) {
  ShardSnapshot s;
  s.layout = SmallLayout();
  s.layout.tables = {spec};
  s.mode = Mode::kAsync;
  s.partition_bytes = kSmallPartitionBytes;
  s.optimizer = "sgd";
  s.tables = std::move(tables);
  return s;
}

TEST_CASE("a shard checkpoint holds each table's ids, rows and slots bit for bit", "[checkpoint][sparse]") {
  const RowOptimizerKind kind = GENERATE(RowOptimizerKind::kSgd, RowOptimizerKind::kAdagrad,
                                         RowOptimizerKind::kRowwiseAdagrad, RowOptimizerKind::kLazyAdam);
  const TableSpec spec = Table(kind);
  auto store = Store(spec);
  Train(*store, {3, -9, 1LL << 40, 3});
  const std::vector<TableSnapshot> before = store->Capture();
  REQUIRE(before.size() == 1);
  REQUIRE(before[0].ids.size() == 3);
  CHECK(before[0].slots.size() == 3 * static_cast<size_t>(RowSlotFloats(kind, 4)));

  const std::string path = TempDir("tables") + "/shard.safetensors";
  REQUIRE(WriteShardCheckpoint(path, Shard(spec, before)).ok());
  absl::StatusOr<ShardSnapshot> read = ReadShardCheckpoint(path);
  REQUIRE(read.ok());
  CHECK(read->layout.tables == std::vector<TableSpec>{spec});
  REQUIRE(read->tables.size() == 1);
  CHECK(read->tables[0].ids == before[0].ids);
  CHECK(read->tables[0].version == before[0].version);
  CHECK(Bytes(read->tables[0].rows) == Bytes(before[0].rows));  // bit for bit (SGD has no slots)
  CHECK(Bytes(read->tables[0].slots) == Bytes(before[0].slots));

  // Restored into a new store, training goes on exactly as in the old one.
  auto again = Store(spec);
  again->Restore(read->tables, 0);
  Train(*store, {3, 5});
  Train(*again, {3, 5});
  CHECK(Rows(*again, {3, 5, -9}) == Rows(*store, {3, 5, -9}));
}

// A rewind restores the tables while the link thread acknowledges copies
// (NoteCopied) and metrics are read (Stats), neither under the server's
// rewind lock: each table is emptied in place, keeps its place in the
// layout, and what it held before is gone.
TEST_CASE("a restore empties each table in place: it keeps its place, and readers meanwhile find it live",
          "[checkpoint][sparse]") {
  SparseStoreOptions o = LiveStoreOptions(Mode::kAsync, 1);
  std::vector<RowsReplica> copies;
  o.on_step_applied = [&](RowsReplica r) { copies.push_back(std::move(r)); };
  SparseStore store(o);
  TableSpec second = Table(RowOptimizerKind::kSgd);
  second.name = "emb2";
  store.Install({Table(RowOptimizerKind::kAdagrad), second});
  const std::vector<int64_t> ids = {4, 8};
  const std::vector<float> g(8, 0.5f);
  REQUIRE(store.Push(0, 0, 1, RowPayload{Bytes(ids), Bytes(g), wire::DTYPE_FLOAT32}).ok());
  const std::vector<TableSnapshot> empty = {TableSnapshot{}, TableSnapshot{}};

  std::atomic<bool> stop{false};
  std::atomic<int64_t> seen_rows{0};
  std::thread reader([&] {
    while (!stop.load()) {
      store.NoteCopied(1, 5, {3});
      for (const SparseTableStats& st : store.Stats()) seen_rows.fetch_add(st.rows);
    }
  });
  for (int i = 0; i < 200; ++i) store.Restore(empty, 0);
  stop = true;
  reader.join();

  const std::vector<SparseTableStats> stats = store.Stats();
  REQUIRE(stats.size() == 2);
  CHECK(stats[1].rows == 0);    // rows 4 and 8 are gone
  CHECK(stats[1].pushes == 1);  // counters are totals: a restore keeps them
  copies.clear();
  REQUIRE(store.Push(0, 1, 1, RowPayload{Bytes(ids), Bytes(g), wire::DTYPE_FLOAT32}).ok());
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].table == 1);  // not table 0: the state kept its index
  CHECK(*copies[0].ids == ids);
}

TEST_CASE("a table with no rows yet, and a table file that disagrees with itself", "[checkpoint][sparse]") {
  const TableSpec spec = Table(RowOptimizerKind::kAdagrad);
  const std::string dir = TempDir("tables");
  REQUIRE(WriteShardCheckpoint(dir + "/empty.safetensors", Shard(spec, Store(spec)->Capture())).ok());
  absl::StatusOr<ShardSnapshot> empty = ReadShardCheckpoint(dir + "/empty.safetensors");
  REQUIRE(empty.ok());
  CHECK(empty->tables.at(0).ids.empty());

  TableSnapshot bad;
  bad.ids = {1, 2};
  bad.rows = std::vector<float>(4, 0.5f);  // one row of 4 for two ids
  bad.slots = std::vector<float>(8, 0.0f);
  REQUIRE(WriteShardCheckpoint(dir + "/bad.safetensors", Shard(spec, {bad})).ok());
  absl::StatusOr<ShardSnapshot> refused = ReadShardCheckpoint(dir + "/bad.safetensors");
  REQUIRE(refused.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(refused.status().message()), Catch::Matchers::Contains("emb.rows"));
}

TEST_CASE("a restore onto another server count keeps the rows that hash to each server", "[checkpoint][sparse]") {
  const TableSpec spec = Table(RowOptimizerKind::kRowwiseAdagrad);
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 300; ++id) ids.push_back(id * 7919);
  auto one = Store(spec);  // the job ran on one server
  Train(*one, ids);
  const std::vector<TableSnapshot> saved = one->Capture();
  const std::vector<float> want = Rows(*one, ids);

  // Now on three servers: each keeps its rows, and together they hold all.
  size_t held = 0;
  for (int s = 0; s < 3; ++s) {
    auto store = Store(spec, s, 3);
    store->Restore(saved, 0);
    const std::vector<TableSnapshot> kept = store->Capture();
    held += kept[0].ids.size();
    for (int64_t id : kept[0].ids) CHECK(RowServer(id, 3) == s);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (RowServer(ids[i], 3) != s) continue;
      const std::vector<float> row = Rows(*store, {ids[i]});
      CHECK(std::memcmp(row.data(), want.data() + i * 4, 16) == 0);
    }
  }
  CHECK(held == ids.size());
}

TEST_CASE("the merge tool writes a table as <table>.ids and <table>.rows", "[checkpoint][sparse]") {
  const TableSpec spec = Table(RowOptimizerKind::kAdagrad);
  const std::string dir = TempDir("merge");
  std::vector<int64_t> all;
  for (int64_t id = 40; id > 0; --id) all.push_back(id * 1000003);
  std::map<int64_t, std::vector<float>> want;  // id -> its row on its server
  for (int s = 0; s < 2; ++s) {
    auto store = Store(spec, s, 2);
    std::vector<int64_t> mine;
    for (int64_t id : all) {
      if (RowServer(id, 2) == s) mine.push_back(id);
    }
    Train(*store, mine);
    for (int64_t id : mine) want[id] = Rows(*store, {id});
    ShardSnapshot shard = Shard(spec, store->Capture());
    shard.server_id = s;
    shard.num_servers = 2;
    absl::StatusOr<KeyMap> map = KeyMap::Build(shard.layout, 2, kSmallPartitionBytes);
    REQUIRE(map.ok());
    for (const ChunkInfo& c : map->chunks()) {
      if (c.server == s) shard.keys.push_back({c.key, 0, std::vector<float>(c.length, 1.0f), {}});
    }
    REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir, s, 2, 0), shard).ok());
  }
  absl::StatusOr<MergedModel> model = MergeShards(dir, std::nullopt);
  REQUIRE(model.ok());
  REQUIRE(model->tables.size() == 1);
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  CHECK(model->tables[0].ids == sorted);
  for (size_t i = 0; i < sorted.size(); ++i) {
    CHECK(std::vector<float>(model->tables[0].rows.begin() + 4 * i, model->tables[0].rows.begin() + 4 * i + 4) ==
          want.at(sorted[i]));
  }
  REQUIRE(WriteModel(dir + "/model.safetensors", *model).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(dir + "/model.safetensors");
  REQUIRE(file.ok());
  CHECK(file->tensors.at("emb.ids").ints == sorted);
  CHECK(file->tensors.at("emb.rows").shape == std::vector<int64_t>{40, 4});
  CHECK(file->tensors.at("emb.rows").values == model->tables[0].rows);
  CHECK(file->tensors.count("emb.slots") == 0);  // optimizer slots stay out of a model
}

TEST_CASE("a checkpoint of 2 servers resharded for 3: the same model, each key and row where it belongs",
          "[checkpoint][sparse]") {
  const TableSpec spec = Table(RowOptimizerKind::kAdagrad);
  const std::string dir = TempDir("reshard-from"), out = TempDir("reshard-to");
  std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> want;  // id -> row, slots
  for (int s = 0; s < 2; ++s) {
    auto store = Store(spec, s, 2);
    std::vector<int64_t> mine;
    for (int64_t id = 1; id <= 60; ++id) {
      if (RowServer(id * 7777, 2) == s) mine.push_back(id * 7777);
    }
    Train(*store, mine);
    ShardSnapshot shard = Shard(spec, store->Capture());
    shard.server_id = s;
    shard.num_servers = 2;
    shard.step = 9;
    for (size_t r = 0; r < shard.tables[0].ids.size(); ++r) {
      const auto& t = shard.tables[0];
      want[t.ids[r]] = {std::vector<float>(t.rows.begin() + 4 * r, t.rows.begin() + 4 * r + 4),
                        std::vector<float>(t.slots.begin() + 4 * r, t.slots.begin() + 4 * r + 4)};
    }
    absl::StatusOr<KeyMap> map = KeyMap::Build(shard.layout, 2, kSmallPartitionBytes);
    REQUIRE(map.ok());
    for (const ChunkInfo& c : map->chunks()) {
      if (c.server != s) continue;
      KeySnapshot k{c.key, 9, std::vector<float>(c.length), {std::vector<float>(c.length)}};
      for (int64_t i = 0; i < c.length; ++i) {
        k.weights[i] = static_cast<float>(c.key.tensor * 100 + c.offset + i);
        k.slots[0][i] = 2 * k.weights[i];  // a slot each key's weights predict
      }
      shard.keys.push_back(std::move(k));
    }
    REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir, s, 2, 9), shard).ok());
  }
  absl::StatusOr<int64_t> step = ReshardCheckpoint(dir, std::nullopt, 3, out);
  REQUIRE(step.ok());
  CHECK(*step == 9);

  // The merge checks that every key and row is held by the server it
  // belongs to, once; the model is the same.
  absl::StatusOr<MergedModel> before = MergeShards(dir, std::nullopt), after = MergeShards(out, std::nullopt);
  REQUIRE(before.ok());
  REQUIRE(after.ok());
  CHECK(after->num_servers == 3);
  CHECK(after->tensors == before->tensors);
  CHECK(after->tables[0].ids == before->tables[0].ids);
  CHECK(after->tables[0].rows == before->tables[0].rows);
  size_t rows = 0;
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(ShardCheckpointPath(out, s, 3, 9));
    REQUIRE(shard.ok());
    for (const KeySnapshot& k : shard->keys) {
      REQUIRE(k.slots.size() == 1);
      for (size_t i = 0; i < k.weights.size(); ++i) CHECK(k.slots[0][i] == 2 * k.weights[i]);
      CHECK(k.version == 9);
    }
    const TableSnapshot& t = shard->tables.at(0);
    for (size_t r = 0; r < t.ids.size(); ++r, ++rows) {
      CHECK(std::vector<float>(t.slots.begin() + 4 * r, t.slots.begin() + 4 * r + 4) == want.at(t.ids[r]).second);
    }
  }
  CHECK(rows == want.size());
  CHECK(ReshardCheckpoint(dir, std::nullopt, 0, TempDir("none")).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReshardCheckpoint(dir, std::nullopt, 3, dir).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps::testing
