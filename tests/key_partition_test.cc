#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "common/key_partition.h"

namespace shardps {
namespace {

Layout RandomLayout(std::mt19937& rng) {
  Layout layout;
  const int tensors = std::uniform_int_distribution<int>(1, 30)(rng);
  for (int t = 0; t < tensors; ++t) {
    const int rank = std::uniform_int_distribution<int>(1, 3)(rng);
    TensorSpec spec{"t" + std::to_string(t), {}};
    for (int d = 0; d < rank; ++d) spec.dims.push_back(std::uniform_int_distribution<int>(1, 300)(rng));
    layout.tensors.push_back(spec);
  }
  return layout;
}

TEST_CASE("partitioning is deterministic, total and bytes-balanced on random layouts", "[partition]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const Layout layout = RandomLayout(rng);
    const int servers = std::uniform_int_distribution<int>(1, 8)(rng);
    const int64_t partition = 4 * std::uniform_int_distribution<int>(1, 5000)(rng);
    auto a = KeyMap::Build(layout, servers, partition);
    auto b = KeyMap::Build(layout, servers, partition);
    REQUIRE(a.ok());
    REQUIRE(b.ok());

    int64_t total = 0, largest = 0;
    std::map<std::pair<uint32_t, uint32_t>, int> owners;
    std::vector<int64_t> per_tensor(layout.tensors.size(), 0);
    for (size_t i = 0; i < a->chunks().size(); ++i) {
      const ChunkInfo& c = a->chunks()[i];
      REQUIRE(c.server == b->chunks()[i].server);  // deterministic
      REQUIRE(c.server >= 0);
      REQUIRE(c.server < servers);
      REQUIRE(c.length * 4 <= partition);
      REQUIRE(++owners[{c.key.tensor, c.key.chunk}] == 1);  // exactly one owner
      per_tensor[c.key.tensor] += c.length;
      total += c.length * 4;
      largest = std::max(largest, c.length * 4);
      REQUIRE(a->Find(c.key) == &a->chunks()[i]);
    }
    for (size_t t = 0; t < layout.tensors.size(); ++t) {
      REQUIRE(per_tensor[t] == layout.tensors[t].NumElements());  // chunks cover each tensor
    }
    const double mean = static_cast<double>(total) / servers;
    int64_t sum = 0;
    for (int s = 0; s < servers; ++s) {
      sum += a->BytesOfServer(s);
      REQUIRE(std::abs(a->BytesOfServer(s) - mean) <= largest);  // within one chunk of the mean
    }
    REQUIRE(sum == total);
  }
}

TEST_CASE("largest chunk goes first, ties to the lower server id", "[partition]") {
  const Layout layout{{{"a", {4}}, {"b", {8}}, {"c", {4}}}};
  auto map = KeyMap::Build(layout, 2, 1 << 20);
  REQUIRE(map.ok());
  // b (32 bytes) -> server 0; a (16) -> server 1; c (16) -> server 1 (16 < 32).
  REQUIRE(map->Find({1, 0})->server == 0);
  REQUIRE(map->Find({0, 0})->server == 1);
  REQUIRE(map->Find({2, 0})->server == 1);
  REQUIRE(map->Find({3, 0}) == nullptr);
  REQUIRE(map->Find({0, 1}) == nullptr);
}

TEST_CASE("partitioning rejects bad arguments", "[partition]") {
  const Layout layout{{{"a", {4}}}};
  REQUIRE(KeyMap::Build(layout, 0, 16).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(KeyMap::Build(layout, 1, 6).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(KeyMap::Build(layout, 1, 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("layout hash depends on names and shapes", "[partition]") {
  const Layout a{{{"w", {2, 3}}}};
  const Layout b{{{"w", {3, 2}}}};
  const Layout c{{{"v", {2, 3}}}};
  REQUIRE(LayoutHash(a) == LayoutHash(Layout{{{"w", {2, 3}}}}));
  REQUIRE(LayoutHash(a) != LayoutHash(b));
  REQUIRE(LayoutHash(a) != LayoutHash(c));
}

}  // namespace
}  // namespace shardps
