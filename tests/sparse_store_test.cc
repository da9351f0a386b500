// Sparse tables on one server: placement, initial rows, row optimizers, and
// the sync, async and ssp contract per table with exact expected rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/table_spec.h"
#include "server/sparse/row_optimizer.h"
#include "server/sparse/sparse_store.h"
#include "server/sparse/sparse_table.h"
#include "tests/sparse_test_rows.h"

namespace shardps {
namespace {

TableSpec Spec(RowOptimizerKind kind = RowOptimizerKind::kSgd, int dim = 2) { return ExactSpec(kind, dim); }

struct Fixture {
  explicit Fixture(Mode mode, int workers = 2, int staleness = 0, int64_t ttl = 0, int admit = 0) {
    SparseStoreOptions o;
    o.row_ttl_steps = ttl;
    o.row_admit_count = admit;
    o.mode = mode;
    o.num_workers = workers;
    o.staleness = staleness;
    o.required_for_step = [this](int64_t) { return required; };
    o.min_live_clock = [this] { return min_clock; };
    required.assign(workers, true);
    store = std::make_unique<SparseStore>(o);
    store->Install({Spec()});
  }
  absl::StatusOr<wire::PushOutcome> Push(int rank, int64_t step, std::vector<int64_t> ids, std::vector<float> g) {
    const std::string i = Bytes(ids), r = Bytes(g);
    return store->Push(rank, step, 0, RowPayload{i, r, wire::DTYPE_FLOAT32});
  }
  // The pull's answer, or nullopt when it waits.
  // (A pull that waits is answered later, after this returns: its answer
  // goes where the callback owns it.)
  std::optional<absl::StatusOr<PulledRows>> Pull(int64_t step, std::vector<int64_t> ids) {
    auto got = std::make_shared<std::optional<absl::StatusOr<PulledRows>>>();
    const std::string i = Bytes(ids);
    store->Pull(0, step, 0, i, absl::InfiniteFuture(), [got](absl::StatusOr<PulledRows> r) { *got = std::move(r); });
    return *got;
  }
  std::vector<bool> required;
  int64_t min_clock = 0;
  std::unique_ptr<SparseStore> store;
};

TEST_CASE("rows are spread evenly over servers by a hash of the id", "[sparse]") {
  std::vector<int> count(4);
  for (int64_t id = 0; id < 40000; ++id) ++count[RowServer(id * 1000003, 4)];
  for (int c : count) CHECK(std::abs(c - 10000) < 400);
  CHECK(RowServer(12345, 1) == 0);
  CHECK(RowServer(-7, 3) == RowServer(-7, 3));
}

TEST_CASE("a layout carries its tables over the wire and in its hash", "[sparse]") {
  Layout dense{{{"w", {2, 3}}}};
  Layout with = dense;
  with.tables.push_back(Spec(RowOptimizerKind::kLazyAdam, 16));
  with.tables[0].vocab = 1000;
  absl::StatusOr<Layout> back = LayoutFromProto(LayoutToProto(with));
  REQUIRE(back.ok());
  CHECK(*back == with);
  CHECK(LayoutHash(with) != LayoutHash(dense));
  Layout other = with;
  other.tables[0].lr = 0.5f;
  CHECK(LayoutHash(other) != LayoutHash(with));
  Layout twice = with;
  twice.tables.push_back(with.tables[0]);
  CHECK(LayoutFromProto(LayoutToProto(twice)).status().code() == absl::StatusCode::kInvalidArgument);
  Layout bad = with;
  bad.tables[0].dim = 0;
  CHECK(LayoutFromProto(LayoutToProto(bad)).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a new row depends only on table, id and seed", "[sparse]") {
  TableSpec t = Spec(RowOptimizerKind::kSgd, 8);
  t.init_scale = 0.5f;
  std::vector<float> a(8), b(8), c(8), d(8);
  InitialRow(t, 42, a.data());
  InitialRow(t, 42, b.data());
  InitialRow(t, 43, c.data());
  t.seed = 1;
  InitialRow(t, 42, d.data());
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != d);
  for (float x : a) CHECK(std::fabs(x) <= 0.5f);
}

TEST_CASE("row optimizers match hand-computed values", "[sparse]") {
  const float g[2] = {3, 4};
  SECTION("adagrad: one accumulator per element") {
    RowOptimizerParams p{RowOptimizerKind::kAdagrad, 2, 0.5f};
    p.adagrad_eps = 0;
    float row[2] = {1, 1}, slots[2] = {0, 0};
    ApplyRow(p, row, slots, g, 1.0f);
    CHECK(slots[0] == 9);
    CHECK(slots[1] == 16);
    CHECK(row[0] == 0.5f);  // 1 - 0.5 * 3 / 3
    CHECK(row[1] == 0.5f);
  }
  SECTION("row-wise adagrad: one accumulator, the mean of the squares") {
    RowOptimizerParams p{RowOptimizerKind::kRowwiseAdagrad, 2, 1.0f};
    p.rowwise_eps = 0;
    float row[2] = {0, 0}, acc = 0;
    const float g2[2] = {1, 7};  // mean square 25
    ApplyRow(p, row, &acc, g2, 1.0f);
    CHECK(acc == 25);
    CHECK(row[0] == -0.2f);
    CHECK(row[1] == -1.4f);
  }
  SECTION("lazy adam: the first step moves each element by lr") {
    RowOptimizerParams p{RowOptimizerKind::kLazyAdam, 2, 0.25f};
    p.adam_eps = 0;
    float row[2] = {0, 0}, slots[5] = {0, 0, 0, 0, 0};
    ApplyRow(p, row, slots, g, 1.0f);
    CHECK(slots[4] == 1);  // the row's own step count
    CHECK_THAT(row[0], Catch::Matchers::WithinAbs(-0.25, 1e-6));
    CHECK_THAT(row[1], Catch::Matchers::WithinAbs(-0.25, 1e-6));
  }
}

TEST_CASE("sparse sync: a step's row gradients are summed, divided by the pushes, applied once", "[sparse]") {
  Fixture f(Mode::kSync);
  REQUIRE(*f.Push(0, 0, {5}, {2, 4}) == wire::PUSH_BUFFERED);
  CHECK(!f.Pull(1, {5}).has_value());  // waits for version 1
  CHECK(*f.Push(0, 0, {5}, {2, 4}) == wire::PUSH_DUPLICATE);
  REQUIRE(*f.Push(1, 0, {7, 5}, {6, 6, 4, 8}) == wire::PUSH_APPLIED);
  auto got = f.Pull(1, {5, 7, 9});
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  CHECK((*got)->version == 1);
  CHECK((*got)->rows == std::vector<float>{-3, -6, -3, -3, 0, 0});
  // The step's empty push counts; a push for a step past the table is refused.
  CHECK(*f.Push(0, 1, {}, {}) == wire::PUSH_BUFFERED);
  CHECK(*f.Push(1, 0, {5}, {1, 1}) == wire::PUSH_DUPLICATE);  // behind the table, pushed before
  const auto too_far = f.Push(1, 4, {5}, {1, 1});
  CHECK(too_far.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(too_far.status().message()), Catch::Contains("push for step 4, but the table is at step 1"));
  CHECK(*f.Push(1, 1, {5}, {2, 2}) == wire::PUSH_APPLIED);
  CHECK((*f.Pull(2, {5}))->rows == std::vector<float>{-4, -7});
}

TEST_CASE("sparse sync: a push for a later step waits for its step and applies then", "[sparse]") {
  // Worker 1 pushes steps 1 and 2 of a table it did not pull before worker
  // 0's push of step 0 arrives (DESIGN.md: a table's step is everyone's).
  Fixture f(Mode::kSync);
  REQUIRE(*f.Push(0, 0, {5}, {2, 2}) == wire::PUSH_BUFFERED);
  REQUIRE(*f.Push(1, 1, {5}, {4, 4}) == wire::PUSH_BUFFERED);
  REQUIRE(*f.Push(1, 2, {}, {}) == wire::PUSH_BUFFERED);
  CHECK(*f.Push(1, 1, {5}, {4, 4}) == wire::PUSH_DUPLICATE);
  CHECK(!f.Pull(1, {5}).has_value());  // step 0 still waits for worker 1
  REQUIRE(*f.Push(1, 0, {}, {}) == wire::PUSH_APPLIED);
  CHECK((*f.Pull(1, {5}))->rows == std::vector<float>{-1, -1});  // step 0 alone: (2 + nothing) / 2
  REQUIRE(*f.Push(0, 1, {}, {}) == wire::PUSH_APPLIED);
  CHECK((*f.Pull(2, {5}))->rows == std::vector<float>{-3, -3});
  // Worker 0's push of step 2 completes it with worker 1's early one.
  REQUIRE(*f.Push(0, 2, {5}, {6, 6}) == wire::PUSH_APPLIED);
  CHECK((*f.Pull(3, {5}))->rows == std::vector<float>{-6, -6});
}

TEST_CASE("sparse sync: steps pushed early by a worker complete at the tick once their last worker died", "[sparse]") {
  Fixture f(Mode::kSync);
  REQUIRE(f.Push(0, 0, {5}, {2, 2}).ok());
  REQUIRE(f.Push(0, 1, {5}, {2, 2}).ok());
  f.required = {true, false};  // worker 1 was declared dead
  f.store->Tick(absl::Now());
  auto got = f.Pull(2, {5});
  REQUIRE(got.has_value());
  CHECK((*got)->version == 2);
  CHECK((*got)->rows == std::vector<float>{-4, -4});
}

TEST_CASE("sparse sync: a waiting pull is answered when the step completes", "[sparse]") {
  Fixture f(Mode::kSync);
  std::optional<absl::StatusOr<PulledRows>> got;
  const std::string ids = Bytes(std::vector<int64_t>{5});
  f.store->Pull(0, 1, 0, ids, absl::InfiniteFuture(), [&](absl::StatusOr<PulledRows> r) { got = std::move(r); });
  REQUIRE(f.Push(0, 0, {5}, {2, 2}).ok());
  CHECK(!got.has_value());
  REQUIRE(f.Push(1, 0, {}, {}).ok());
  REQUIRE(got.has_value());
  CHECK((*got)->rows == std::vector<float>{-1, -1});
}

TEST_CASE("sparse sync: a step that waits only for a dead worker completes at the tick", "[sparse]") {
  Fixture f(Mode::kSync);
  REQUIRE(f.Push(0, 0, {5}, {2, 2}).ok());
  f.required = {true, false};  // worker 1 was declared dead
  f.store->Tick(absl::Now());
  CHECK((*f.Pull(1, {5}))->rows == std::vector<float>{-2, -2});
}

TEST_CASE("sparse async: each push applies at once, divided by the workers", "[sparse]") {
  Fixture f(Mode::kAsync);
  CHECK(*f.Push(0, 0, {5}, {2, 4}) == wire::PUSH_APPLIED);
  CHECK((*f.Pull(0, {5}))->rows == std::vector<float>{-1, -2});
  CHECK(*f.Push(1, 0, {5}, {4, 8}) == wire::PUSH_APPLIED);
  const auto got = f.Pull(0, {5});
  CHECK((*got)->rows == std::vector<float>{-3, -6});
  CHECK((*got)->version == 2);
}

TEST_CASE("sparse ssp: a pull waits for the slowest worker within the staleness", "[sparse]") {
  Fixture f(Mode::kSsp, 2, 1);
  REQUIRE(f.Push(0, 0, {5}, {2, 2}).ok());
  CHECK((*f.Pull(1, {5}))->rows == std::vector<float>{-1, -1});
  std::optional<absl::StatusOr<PulledRows>> got;
  const std::string ids = Bytes(std::vector<int64_t>{5});
  f.store->Pull(0, 2, 0, ids, absl::InfiniteFuture(), [&](absl::StatusOr<PulledRows> r) { got = std::move(r); });
  CHECK(!got.has_value());
  f.min_clock = 1;
  f.store->WakeReady();
  CHECK(got.has_value());
}

TEST_CASE("sparse bad input is refused before any row changes", "[sparse]") {
  Fixture f(Mode::kAsync);
  TableSpec fixed = Spec();
  fixed.name = "fixed";
  fixed.vocab = 10;
  SparseStoreOptions o;
  o.mode = Mode::kAsync;
  o.num_servers = 2;
  o.server_id = 0;
  SparseStore two(o);
  two.Install({fixed});
  const std::string one_id = Bytes(std::vector<int64_t>{5});
  const std::string row = Bytes(std::vector<float>{1, 1});
  CHECK(f.store->Push(0, 0, 3, {one_id, row}).status().code() == absl::StatusCode::kNotFound);  // unknown table
  CHECK(f.Push(0, 0, {5}, {1, 1, 1}).status().code() == absl::StatusCode::kInvalidArgument);     // rows != ids
  CHECK(f.store->Push(0, 0, 0, {"abc", ""}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.Push(0, 0, {5}, {1, NAN}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.Push(0, 0, {5}, {1, INFINITY}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK((*f.Pull(0, {5}))->rows == std::vector<float>{0, 0});  // nothing applied
  const std::string out_of_vocab = Bytes(std::vector<int64_t>{10});
  const auto vocab = two.Push(0, 0, 0, {out_of_vocab, row});
  CHECK(vocab.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(vocab.status().message()).find("outside its vocabulary [0, 10)") != std::string::npos);
  int64_t elsewhere = 0;
  while (RowServer(elsewhere, 2) == 0) ++elsewhere;
  const std::string other = Bytes(std::vector<int64_t>{elsewhere});
  CHECK(two.Push(0, 0, 0, {other, row}).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a table counts rows, bytes and pull sizes", "[sparse]") {
  SparseTable t(Spec(RowOptimizerKind::kRowwiseAdagrad, 64));
  std::vector<int64_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 7919;
  std::vector<float> out(ids.size() * 64);
  t.Read(ids.data(), ids.size(), out.data());
  t.Read(ids.data(), ids.size(), out.data());
  CHECK(t.rows() == 5000);
  CHECK(t.rows_created() == 5000);
  CHECK(t.bytes() >= 5000 * 65 * 4);
  int visited = 0;
  t.ForEach([&](int64_t, const float*, const float* slots) {
    CHECK(slots[0] == 0);
    ++visited;
  });
  CHECK(visited == 5000);
}

TEST_CASE("rows untouched for --row_ttl_steps are evicted, and come back as new rows", "[sparse]") {
  Fixture f(Mode::kAsync, 1, 0, /*ttl=*/4);
  REQUIRE(f.Push(0, 0, {1, 2}, {2, 2, 2, 2}).ok());
  for (int64_t step = 1; step <= 3; ++step) REQUIRE(f.Push(0, step, {2}, {1, 1}).ok());
  f.store->Tick(absl::Now());
  CHECK(f.store->Stats()[0].rows_evicted == 0);  // step 3: nothing is 4 steps old
  REQUIRE(f.Pull(6, {2}).has_value());           // a read touches row 2 at step 6
  f.store->Tick(absl::Now());
  std::vector<SparseTableStats> st = f.store->Stats();
  CHECK(st[0].rows == 1);  // row 1, last touched at step 0, is gone
  CHECK(st[0].rows_evicted == 1);
  auto back = f.Pull(7, {1, 2});
  REQUIRE(back.has_value());
  REQUIRE(back->ok());
  CHECK((*back)->rows == std::vector<float>{0, 0, -5, -5});  // row 1 new again; row 2 kept its updates
  CHECK(f.store->Stats()[0].rows_created == 3);
}

TEST_CASE("a refused sync push or an unanswered pull at a far step ages no row (--row_ttl_steps)", "[sparse]") {
  Fixture f(Mode::kSync, 1, 0, /*ttl=*/4);
  REQUIRE(f.Push(0, 0, {1}, {2, 2}).ok());
  absl::StatusOr<wire::PushOutcome> far = f.Push(0, 1000000000, {1}, {1, 1});
  REQUIRE(!far.ok());
  CHECK(far.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(!f.Pull(1000000000, {1}).has_value());  // waits: the table is at step 1
  f.store->Tick(absl::Now());
  CHECK(f.store->Stats()[0].rows_evicted == 0);
  auto kept = f.Pull(1, {1});
  REQUIRE(kept.has_value());
  REQUIRE(kept->ok());
  CHECK((*kept)->rows == std::vector<float>{-2, -2});  // row 1 keeps its update
}

TEST_CASE("an async push that repeats an id counts it once (admission) and applies the sum", "[sparse]") {
  Fixture f(Mode::kAsync, 1, 0, /*ttl=*/0, /*admit=*/3);
  REQUIRE(f.Push(0, 0, {4, 4, 4}, {1, 1, 1, 1, 1, 1}).ok());
  CHECK(f.store->Stats()[0].rows == 0);  // one push touched id 4: not yet admitted
  Fixture g(Mode::kAsync, 1);
  REQUIRE(g.Push(0, 0, {5, 4, 5}, {1, 1, 2, 2, 3, 3}).ok());
  auto rows = g.Pull(1, {4, 5});
  REQUIRE(rows.has_value());
  REQUIRE(rows->ok());
  CHECK((*rows)->rows == std::vector<float>{-2, -2, -4, -4});
}

TEST_CASE("a row pull whose answer would pass the message limit is refused before any row is read", "[sparse]") {
  SparseStoreOptions o = LiveStoreOptions(Mode::kAsync, 1);
  o.max_answer_bytes = 1000;  // 500 values in bfloat16: 250 rows of dim 2
  SparseStore store(o);
  store.Install({Spec()});
  std::vector<int64_t> ids(251);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::optional<absl::StatusOr<std::vector<PulledRows>>> got;
  const auto keep = [&](absl::StatusOr<std::vector<PulledRows>> r) { got = std::move(r); };
  store.PullParts(0, 0, {{0, ids.size(), std::nullopt}}, Bytes(ids), absl::InfiniteFuture(), keep);
  REQUIRE(got.has_value());
  CHECK(got->status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(got->status().message()), Catch::Matchers::Contains("a pull of 251 rows of table"));
  CHECK(store.Stats()[0].rows_created == 0);  // nothing was read (a read creates rows)
  // A part that claims 2^62 ids is refused by size, with no overflow.
  got.reset();
  store.PullParts(0, 0, {{0, uint64_t{1} << 62, std::nullopt}}, Bytes(ids), absl::InfiniteFuture(), keep);
  REQUIRE(got.has_value());
  CHECK(got->status().code() == absl::StatusCode::kResourceExhausted);
  ids.resize(250);
  got.reset();
  store.PullParts(0, 0, {{0, ids.size(), std::nullopt}}, Bytes(ids), absl::InfiniteFuture(), keep);
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  CHECK((**got)[0].rows.size() == 500);
}

TEST_CASE("sparse async AdaGrad: a push is 1/N of a step, as for dense keys", "[sparse]") {
  SparseStoreOptions o = LiveStoreOptions(Mode::kAsync, 2);
  o.async_lr_scaling = AsyncLrScaling::kWorkers;
  SparseStore store(o);
  TableSpec spec = Spec(RowOptimizerKind::kAdagrad);
  store.Install({spec});
  const std::string ids = Bytes(std::vector<int64_t>{9});
  const std::string g = Bytes(std::vector<float>{2, 2});
  for (int rank = 0; rank < 2; ++rank) REQUIRE(store.Push(rank, 0, 0, RowPayload{ids, g, wire::DTYPE_FLOAT32}).ok());
  const std::vector<TableSnapshot> snap = store.Capture();
  // Each push adds g^2 / 2: after both, one sync step's g^2.
  CHECK(snap[0].slots == std::vector<float>{4, 4});
  // Steps of lr/2: 0.5 * 2 / sqrt(2) then 0.5 * 2 / 2.
  CHECK_THAT(snap[0].rows[0], Catch::Matchers::WithinAbs(-(1 / std::sqrt(2.0) + 0.5), 1e-6));
}

TEST_CASE("with --row_admit_count, a row is stored at its id's Kth push and reads as new before", "[sparse]") {
  Fixture f(Mode::kAsync, 1, 0, /*ttl=*/0, /*admit=*/3);
  REQUIRE(f.Push(0, 0, {4, 8}, {1, 1, 1, 1}).ok());
  REQUIRE(f.Push(0, 1, {4}, {2, 2}).ok());
  auto before = f.Pull(2, {4, 8});
  REQUIRE(before.has_value());
  REQUIRE(before->ok());
  CHECK((*before)->rows == std::vector<float>{0, 0, 0, 0});  // initial rows: two pushes dropped
  std::vector<SparseTableStats> st = f.store->Stats();
  CHECK(st[0].rows == 0);  // a pull stores nothing either
  CHECK(st[0].ids_waiting == 2);
  REQUIRE(f.Push(0, 2, {4}, {3, 3}).ok());  // id 4's third push: stored, this gradient applied
  auto after = f.Pull(3, {4, 8});
  REQUIRE(after.has_value());
  REQUIRE(after->ok());
  CHECK((*after)->rows == std::vector<float>{-3, -3, 0, 0});
  st = f.store->Stats();
  CHECK(st[0].rows == 1);
  CHECK(st[0].ids_waiting == 1);
}

}  // namespace
}  // namespace shardps
