#include <catch2/catch.hpp>

#include "client/pulled_versions.h"

namespace shardps {
namespace {

const ChunkKey kKey{0, 1};
const ChunkKey kOther{1, 0};

TEST_CASE("a push of step t names the version the pull for t answered", "[pulled_versions]") {
  PulledVersions pulled;
  REQUIRE_FALSE(pulled.For(kKey, 0).has_value());  // nothing pulled: the server falls back
  pulled.Record(kKey, 4, 17);
  pulled.Record(kKey, 5, 23);  // the next step's weights, prefetched before step 4's pushes
  REQUIRE(pulled.For(kKey, 4) == 17);
  REQUIRE(pulled.For(kKey, 5) == 23);
  REQUIRE(pulled.For(kKey, 9) == 23);  // no pull for 9 yet: the newest before it
  REQUIRE_FALSE(pulled.For(kKey, 3).has_value());
  REQUIRE_FALSE(pulled.For(kOther, 4).has_value());  // keys apart
}

TEST_CASE("pulled versions: repeats, late answers and rewinds", "[pulled_versions]") {
  PulledVersions pulled;
  pulled.Record(kKey, 4, 17);
  pulled.Record(kKey, 4, 18);  // the same step pulled again: the later answer
  REQUIRE(pulled.For(kKey, 4) == 18);
  pulled.Record(kKey, 6, 30);
  pulled.Record(kKey, 5, 25);  // step 5's answer after step 6's
  REQUIRE(pulled.For(kKey, 5) == 25);
  REQUIRE(pulled.For(kKey, 6) == 30);
  pulled.Record(kKey, 2, 9);  // the job rewound to step 2: later steps forgotten
  REQUIRE(pulled.For(kKey, 2) == 9);
  REQUIRE(pulled.For(kKey, 6) == 9);
}

}  // namespace
}  // namespace shardps
