// The worker's side of a batch of rows (client/row_batches.h): distinct ids
// grouped by server, repeated ids' gradients summed, pulled rows scattered
// back to every position; the same plan whether the ids come distinct and
// ascending (the fast path) or not.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "client/row_batches.h"
#include "common/table_spec.h"

namespace shardps {
namespace {

// Checks what any plan of ids[0..n) over `servers` must be.
void CheckPlan(const std::vector<int64_t>& ids, int servers, const RowPlan& plan) {
  const std::set<int64_t> distinct(ids.begin(), ids.end());
  REQUIRE(plan.ids.size() == distinct.size());
  CHECK(std::set<int64_t>(plan.ids.begin(), plan.ids.end()) == distinct);
  REQUIRE(plan.server_begin.size() == static_cast<size_t>(servers) + 1);
  CHECK(plan.server_begin.back() == plan.ids.size());
  for (int s = 0; s < servers; ++s) {
    for (size_t d = plan.server_begin[s]; d < plan.server_begin[s + 1]; ++d) CHECK(RowServer(plan.ids[d], servers) == s);
  }
  REQUIRE(plan.slot_of.size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) CHECK(plan.ids[plan.slot_of[i]] == ids[i]);
  bool identity = plan.ids.size() == ids.size();
  for (size_t i = 0; i < ids.size(); ++i) identity = identity && plan.slot_of[i] == i;
  CHECK(plan.identity == identity);
}

TEST_CASE("a batch's ids: distinct, by server, repeated gradients summed, rows scattered back", "[rows]") {
  const std::vector<int64_t> ids = {7, -3, 7, 1LL << 40, 12, -3, 7};
  const RowPlan plan = PlanRows(ids.data(), ids.size(), 3);
  CheckPlan(ids, 3, plan);
  std::vector<float> grads;
  for (size_t i = 0; i < ids.size(); ++i) grads.insert(grads.end(), {float(i), 1.0f});
  const std::vector<float> sums = SumRows(plan, grads.data(), ids.size(), 2);
  const size_t seven = plan.slot_of[0];
  CHECK(sums[2 * seven] == 0 + 2 + 6);
  CHECK(sums[2 * seven + 1] == 3);
  std::vector<float> rows(plan.ids.size() * 2);
  for (size_t d = 0; d < plan.ids.size(); ++d) rows[2 * d] = static_cast<float>(plan.ids[d]);
  std::vector<float> out(ids.size() * 2, -1);
  ScatterRows(plan, rows.data(), 2, out.data());
  for (size_t i = 0; i < ids.size(); ++i) CHECK(out[2 * i] == static_cast<float>(ids[i]));
}

TEST_CASE("distinct ascending ids take the fast path to the same plan", "[rows]") {
  std::vector<int64_t> ascending;
  for (int64_t i = -50; i < 200; i += 3) ascending.push_back(i * 1000003);
  const RowPlan fast = PlanRows(ascending.data(), ascending.size(), 4);
  CheckPlan(ascending, 4, fast);
  // The same ids with one repeat at the end go through the hash map: the
  // distinct ids come out in the same order.
  std::vector<int64_t> repeated = ascending;
  repeated.push_back(ascending.front());
  const RowPlan slow = PlanRows(repeated.data(), repeated.size(), 4);
  CheckPlan(repeated, 4, slow);
  CHECK(slow.ids == fast.ids);
  CHECK(std::vector<uint32_t>(slow.slot_of.begin(), slow.slot_of.end() - 1) == fast.slot_of);
  // Equal neighbours are not ascending: planned as repeats.
  const std::vector<int64_t> pair = {5, 5};
  CHECK(PlanRows(pair.data(), 2, 2).ids == std::vector<int64_t>{5});
}

TEST_CASE("a plan is the identity only for distinct ids already in server order", "[rows]") {
  std::vector<int64_t> ascending;
  for (int64_t i = 0; i < 100; ++i) ascending.push_back(i * 7919);
  CHECK(PlanRows(ascending.data(), ascending.size(), 1).identity);  // one server: any distinct ascending batch
  CHECK_FALSE(PlanRows(ascending.data(), ascending.size(), 4).identity);  // spread over 4 servers
  const std::vector<int64_t> descending = {9, 4, 1};
  CHECK(PlanRows(descending.data(), descending.size(), 1).identity);  // distinct: the hash-map path keeps order
  const std::vector<int64_t> repeated = {1, 2, 1};
  CHECK_FALSE(PlanRows(repeated.data(), repeated.size(), 1).identity);
}

}  // namespace
}  // namespace shardps
