// Sparse rows on one store: how a step's pushed gradients become a row's
// step. In sync a push's repeated ids are summed before the optimizer; in
// async, --async_lr_scaling=auto takes an AdaGrad push whole and an SGD one
// as 1/N of a step.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/table_spec.h"
#include "server/sparse/sparse_store.h"
#include "tests/sparse_test_rows.h"

namespace shardps {
namespace {

TEST_CASE("sync, one worker: a push's repeated ids are summed before the optimizer, ascending ones go as they are",
          "[sparse]") {
  SparseStore store(LiveStoreOptions(Mode::kSync, 1));
  store.Install({ExactSpec(RowOptimizerKind::kAdagrad, 1)});
  const auto push = [&](int64_t step, std::vector<int64_t> ids, std::vector<float> g) {
    const std::string i = Bytes(ids), r = Bytes(g);
    REQUIRE(store.Push(0, step, 0, RowPayload{i, r, wire::DTYPE_FLOAT32}).ok());
  };
  const auto row = [&](int64_t step, int64_t id) {
    float got = NAN;
    const std::string i = Bytes(std::vector<int64_t>{id});
    store.Pull(0, step, 0, i, absl::InfiniteFuture(), [&](absl::StatusOr<PulledRows> r) {
      if (r.ok()) got = r->rows[0];
    });
    return got;
  };
  push(0, {5, 5}, {3, 4});  // summed: 7, so AdaGrad's first step is -7 / sqrt(49) = -1 (twice would give -1.8)
  CHECK(row(1, 5) == Approx(-1.0f));
  push(1, {2, 5}, {1, 24});  // ascending: applied as they came; 5's sum of squares 49 + 576 = 625
  CHECK(row(2, 2) == Approx(-1.0f));
  CHECK(row(2, 5) == Approx(-1.0f - 24.0f / 25.0f));
}

// Two async pushes of gradient 2 to row 9 (lr 1, rows from 0), under
// --async_lr_scaling=auto: the row as it ends, with its slots.
TableSnapshot TwoAutoPushes(RowOptimizerKind kind) {
  SparseStoreOptions o = LiveStoreOptions(Mode::kAsync, 2);
  o.async_lr_scaling = AsyncLrScaling::kAuto;
  SparseStore store(o);
  store.Install({ExactSpec(kind)});
  const std::string ids = Bytes(std::vector<int64_t>{9});
  const std::string g = Bytes(std::vector<float>{2, 2});
  for (int rank = 0; rank < 2; ++rank) REQUIRE(store.Push(rank, 0, 0, RowPayload{ids, g, wire::DTYPE_FLOAT32}).ok());
  return store.Capture()[0];
}

TEST_CASE("sparse async, --async_lr_scaling=auto: AdaGrad takes every push whole, SGD 1/N of a step", "[sparse]") {
  const TableSnapshot adagrad = TwoAutoPushes(RowOptimizerKind::kAdagrad);
  CHECK(adagrad.slots == std::vector<float>{8, 8});  // 4 + 4: each push's g^2 whole
  // Steps of lr: 2 / sqrt(4) then 2 / sqrt(8), as local AdaGrad takes two batches.
  CHECK_THAT(adagrad.rows[0], Catch::Matchers::WithinAbs(-(1 + 2 / std::sqrt(8.0)), 1e-6));
  const TableSnapshot sgd = TwoAutoPushes(RowOptimizerKind::kSgd);
  CHECK(sgd.rows == std::vector<float>{-2, -2});  // lr / 2 times 2, twice
}

}  // namespace
}  // namespace shardps
