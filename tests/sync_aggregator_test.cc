// server/sync_aggregator: a sync step's gradients are summed in rank order,
// whatever order they arrive in, so that a run is bitwise reproducible (and
// a replica's failover can be checked bit for bit: DESIGN.md, "Replication").
#include <catch2/catch.hpp>

#include <algorithm>
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

}  // namespace
}  // namespace shardps
