// server/sync_aggregator: a sync step's gradients are summed in rank order,
// whatever order they arrive in, so that a run is bitwise reproducible (and
// a replica's failover can be checked bit for bit: DESIGN.md, "Replication").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "server/membership.h"
#include "server/sync_aggregator.h"

namespace shardps {
namespace {

constexpr int kWorkers = 4;

// Values whose float sum depends on the order they are added in.
std::vector<float> GradientOf(int rank) {
  const float base[kWorkers] = {1e8f, 1.0f, -1e8f, 3.0f};
  return {base[rank], base[(rank + 1) % kWorkers] * 0.5f};
}

ChunkPayload PayloadOf(const std::vector<float>& g) {
  return ChunkPayload{ChunkKey{0, 0}, wire::DTYPE_FLOAT32,
                      {absl::string_view(reinterpret_cast<const char*>(g.data()), g.size() * 4)}};
}

// The mean the aggregator applies when the ranks push in `order`.
std::vector<float> MeanWhenPushedIn(const std::vector<int>& order, Membership& members) {
  std::vector<float> applied;
  SyncAggregator sync(kWorkers, &members, [&](KeyState&, const float* mean) { applied.assign(mean, mean + 2); });
  KeyState k(ChunkInfo{ChunkKey{0, 0}, 0, 2, 0}, 0, /*num_slots=*/0, kWorkers);
  absl::MutexLock lock(&k.mu);
  for (int r : order) {
    std::vector<float> g = GradientOf(r);
    REQUIRE(sync.Add(k, r, 0, PayloadOf(g)).ok());
  }
  REQUIRE(applied.size() == 2);
  return applied;
}

TEST_CASE("a sync step's sum is the same to the bit in every arrival order") {
  ManualClock clock;
  Membership members(kWorkers, absl::Seconds(60), absl::Seconds(60), &clock);
  for (int r = 0; r < kWorkers; ++r) members.Register(r, 0);
  std::vector<int> order = {0, 1, 2, 3};
  const std::vector<float> in_rank_order = MeanWhenPushedIn(order, members);
  // ((1e8 + 1) - 1e8) + 3 in float is 3: the 1 is lost in rank order.
  float expected = ((1e8f + 1.0f) + -1e8f) + 3.0f;
  REQUIRE(in_rank_order[0] == expected / 4);
  int orders = 0;
  while (std::next_permutation(order.begin(), order.end())) {
    const std::vector<float> mean = MeanWhenPushedIn(order, members);
    CHECK(std::memcmp(mean.data(), in_rank_order.data(), 8) == 0);
    ++orders;
  }
  REQUIRE(orders == 23);
}

// Pushes `grads[r]` for every rank in `order` at `step`; the mean applied.
std::vector<float> StepMean(SyncAggregator& sync, KeyState& k, int64_t step, const std::vector<int>& order,
                            const std::vector<std::vector<float>>& grads, std::vector<float>& applied)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
  applied.clear();
  for (int r : order) REQUIRE(sync.Add(k, r, step, PayloadOf(grads[r])).ok());
  REQUIRE(applied.size() == 2);
  k.version = step + 1;
  return applied;
}

TEST_CASE("each sync step's sum starts from zero: no sign of zero or value is left from the step before") {
  ManualClock clock;
  Membership members(kWorkers, absl::Seconds(60), absl::Seconds(600), &clock);
  std::vector<uint64_t> sessions;
  for (int r = 0; r < kWorkers; ++r) sessions.push_back(members.Register(r, 0));
  std::vector<float> applied;
  SyncAggregator sync(kWorkers, &members, [&](KeyState&, const float* mean) { applied.assign(mean, mean + 2); });
  KeyState k(ChunkInfo{ChunkKey{0, 0}, 0, 2, 0}, 0, /*num_slots=*/0, kWorkers);
  absl::MutexLock lock(&k.mu);

  // Every rank pushes -0: summed from +0 the mean is +0, whoever comes first.
  const std::vector<std::vector<float>> zeros(kWorkers, {-0.0f, -0.0f});
  std::vector<float> mean = StepMean(sync, k, 0, {2, 0, 3, 1}, zeros, applied);
  CHECK_FALSE(std::signbit(mean[0]));
  CHECK_FALSE(std::signbit(mean[1]));

  const std::vector<std::vector<float>> grads = {{1, 2}, {4, 8}, {16, 32}, {64, 128}};
  mean = StepMean(sync, k, 1, {3, 1, 0, 2}, grads, applied);
  CHECK(mean == std::vector<float>{85.0f / 4, 170.0f / 4});

  // Rank 0 is declared dead: the step completes with the held ranks alone,
  // the first of them written over the last step's sum.
  clock.Advance(absl::Seconds(61));
  for (int r = 1; r < kWorkers; ++r) REQUIRE(members.Touch(sessions[r]).ok());
  REQUIRE(members.ExpireSilent() == std::vector<int>{0});
  mean = StepMean(sync, k, 2, {3, 2, 1}, grads, applied);
  CHECK(mean == std::vector<float>{84.0f / 3, 168.0f / 3});
  mean = StepMean(sync, k, 3, {1, 3, 2}, zeros, applied);
  CHECK_FALSE(std::signbit(mean[0]));
}

}  // namespace
}  // namespace shardps
