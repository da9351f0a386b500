// Replication of sparse tables at the store level (--replicas > 1): the
// copies a primary's store hands on, installed in a backup's store, leave
// the backup able to continue exactly as the primary would have, admission
// by count included (--row_admit_count): an id the primary has counted but
// not stored is counted, not stored, on the backup too.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "server/sparse/sparse_store.h"
#include "tests/sparse_test_rows.h"

namespace shardps {
namespace {

constexpr int kAdmit = 3;


// One worker, sync, admission at the third push; `copies` collects what a
// primary hands on.
std::unique_ptr<SparseStore> Store(std::vector<RowsReplica>* copies, int admit = kAdmit, int64_t ttl = 0) {
  SparseStoreOptions o = LiveStoreOptions(Mode::kSync, 1);
  o.row_admit_count = admit;
  o.row_ttl_steps = ttl;
  if (copies != nullptr) o.on_step_applied = [copies](RowsReplica r) { copies->push_back(std::move(r)); };
  auto store = std::make_unique<SparseStore>(o);
  store->Install({ExactSpec()});
  return store;
}

void Push(SparseStore& store, int64_t step, const std::vector<int64_t>& ids, float g) {
  const std::string i = Bytes(ids), r = Bytes(std::vector<float>(ids.size() * 2, g));
  absl::StatusOr<wire::PushOutcome> outcome = store.Push(0, step, 0, RowPayload{i, r, wire::DTYPE_FLOAT32});
  INFO(outcome.status().ToString());
  REQUIRE(outcome.ok());
}

std::vector<float> Read(SparseStore& store, int64_t step, const std::vector<int64_t>& ids) {
  std::optional<absl::StatusOr<PulledRows>> got;
  store.Pull(0, step, 0, Bytes(ids), absl::InfiniteFuture(), [&](absl::StatusOr<PulledRows> r) { got = std::move(r); });
  REQUIRE(got.has_value());
  REQUIRE(got->ok());
  return (*got)->rows;
}

TEST_CASE("a backup's copied rows age from the primary's step, not from 0 (--row_ttl_steps)", "[sparse][replication]") {
  std::vector<RowsReplica> copies;
  std::unique_ptr<SparseStore> primary = Store(&copies, /*admit=*/0, /*ttl=*/8);
  std::unique_ptr<SparseStore> backup = Store(nullptr, /*admit=*/0, /*ttl=*/8);
  for (int64_t step = 0; step < 20; ++step) Push(*primary, step, {1, 2}, 1);
  for (const RowsReplica& c : copies) REQUIRE(backup->InstallCopy(c).ok());
  // The primary fails; the backup serves step 20, which touches id 1 only.
  Push(*backup, 20, {1}, 1);
  backup->Tick(absl::Now());
  CHECK(backup->Stats()[0].rows_evicted == 0);  // id 2 was touched at step 19, within 8 steps
  CHECK(Read(*backup, 21, {2}) == std::vector<float>{-20, -20});
  primary->Tick(absl::Now());
  CHECK(primary->Stats()[0].rows_evicted == 0);
}

TEST_CASE("a backup's copy of a table keeps admission by count", "[sparse][replication]") {
  std::vector<RowsReplica> copies;
  std::unique_ptr<SparseStore> primary = Store(&copies);
  std::unique_ptr<SparseStore> backup = Store(nullptr);
  // Id 4 is pushed three times (stored at the third), id 8 twice (counted).
  Push(*primary, 0, {4, 8}, 1);
  Push(*primary, 1, {4, 8}, 1);
  Push(*primary, 2, {4}, 1);
  REQUIRE(copies.size() == 3);
  for (const RowsReplica& c : copies) REQUIRE(backup->InstallCopy(c).ok());
  std::vector<SparseTableStats> p = primary->Stats(), b = backup->Stats();
  CHECK(p[0].rows == 1);
  CHECK(p[0].ids_waiting == 1);
  CHECK(b[0].rows == p[0].rows);  // id 8 is not stored on the backup either
  CHECK(b[0].ids_waiting == p[0].ids_waiting);
  CHECK(Read(*backup, 3, {4, 8}) == Read(*primary, 3, {4, 8}));

  // The primary fails; the backup continues with id 8's third push, which
  // stores it and applies only that gradient, as the primary would have.
  Push(*primary, 3, {8}, 2);
  Push(*backup, 3, {8}, 2);
  CHECK(Read(*backup, 4, {4, 8}) == std::vector<float>{-1, -1, -2, -2});
  CHECK(Read(*backup, 4, {4, 8}) == Read(*primary, 4, {4, 8}));
  CHECK(backup->Stats()[0].ids_waiting == 0);
}

TEST_CASE("a whole copy for a joining server carries the ids counted toward admission", "[sparse][replication]") {
  std::vector<RowsReplica> copies;
  std::unique_ptr<SparseStore> primary = Store(&copies);
  Push(*primary, 0, {4, 8, 15}, 1);
  Push(*primary, 1, {4, 8}, 1);
  Push(*primary, 2, {4}, 1);
  std::unique_ptr<SparseStore> joiner = Store(nullptr);
  std::vector<RowsReplica> whole;
  primary->CopyAll(/*piece_rows=*/2, [&](RowsReplica r) { whole.push_back(std::move(r)); });
  REQUIRE(whole.size() >= 2);  // three ids in pieces of two
  for (const RowsReplica& c : whole) REQUIRE(joiner->InstallCopy(c).ok());
  CHECK(joiner->Stats()[0].rows == 1);
  CHECK(joiner->Stats()[0].ids_waiting == 2);
  // Id 8's next push stores it on both; id 15's does not yet.
  Push(*primary, 3, {8, 15}, 2);
  Push(*joiner, 3, {8, 15}, 2);
  CHECK(Read(*joiner, 4, {4, 8, 15}) == Read(*primary, 4, {4, 8, 15}));
  CHECK(joiner->Stats()[0].ids_waiting == 1);
}

TEST_CASE("a copy whose admission counts do not match its ids is refused", "[sparse][replication]") {
  std::vector<RowsReplica> copies;
  std::unique_ptr<SparseStore> primary = Store(&copies);
  Push(*primary, 0, {4, 8}, 1);
  REQUIRE(copies.size() == 1);
  RowsReplica bad = copies[0];
  bad.admission = std::make_shared<const std::vector<int32_t>>(std::vector<int32_t>{1});
  std::unique_ptr<SparseStore> backup = Store(nullptr);
  const absl::Status refused = backup->InstallCopy(bad);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("admission counts"));
  CHECK(backup->Stats()[0].ids_waiting == 0);
}

}  // namespace
}  // namespace shardps
