// A worker held back in async mode, against a real ps_server process through
// the C API (libshardps.so): its push names the version it was computed
// from, the server counts the updates it missed, and the default
// --staleness_lr=capped damps it by num_workers / (1 + staleness), exactly.
// Values are small integers and halves, compared with ==.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api.h"
#include "tests/server_process.h"

namespace shardps::testing {
namespace {

const char* const kNames[] = {"w", "b"};
const int kNdims[] = {2, 1};
const int64_t kDims[] = {2, 3, 3};
const int kBoth[] = {0, 1};

// A registered worker of a two-worker async job on `port`.
ShardpsClientHandle Worker(int port, int rank) {
  const std::string config = absl::StrCat("--servers=127.0.0.1:", port, " --rank=", rank,
                                          " --num_workers=2 --mode=async --partition_bytes=8 --server_timeout=20s");
  ShardpsClientHandle c = nullptr;
  REQUIRE(ShardpsClientCreate(config.c_str(), 2, kNames, kNdims, kDims, &c) == SHARDPS_OK);
  int64_t step = -1;
  INFO(ShardpsLastError());
  REQUIRE(ShardpsClientRegister(c, &step) == SHARDPS_OK);
  return c;
}

struct Weights {
  std::vector<float> w = std::vector<float>(6), b = std::vector<float>(3);
  float* outs[2] = {w.data(), b.data()};
  bool All(float v) const { return w == std::vector<float>(6, v) && b == std::vector<float>(3, v); }
};

// The weights after the fast worker pushes gradient 4 at steps 0..2 (each
// fresh: lr / 2 = 0.5 of it, -2) and the slow worker, which pulled version 0
// and then step 1's weights, pushes gradient 4 for step 0.
Weights SlowAfterThreeFast(const std::string& staleness_lr) {
  ServerProcess server(RunfilePath("server/ps_server"),
                       {"--port=0", "--num_workers=2", "--mode=async", "--optimizer=sgd", "--lr=1",
                        "--partition_bytes=8", "--staleness_lr=" + staleness_lr});
  ShardpsClientHandle fast = Worker(server.port(), 0), slow = Worker(server.port(), 1);
  std::vector<float> zw(6, 0.0f), zb(3, 0.0f), gw(6, 4.0f), gb(3, 4.0f);
  const float* zeros[] = {zw.data(), zb.data()};
  const float* grads[] = {gw.data(), gb.data()};
  int applied = 0;
  REQUIRE(ShardpsClientInit(fast, zeros, &applied) == SHARDPS_OK);
  Weights seen;
  REQUIRE(ShardpsPull(slow, 0, 2, kBoth, seen.outs) == SHARDPS_OK);  // the slow one computes on version 0
  for (int64_t step = 0; step < 3; ++step) {
    REQUIRE(ShardpsPull(fast, step, 2, kBoth, seen.outs) == SHARDPS_OK);
    REQUIRE(ShardpsPush(fast, step, 2, kBoth, grads) == SHARDPS_OK);
  }
  REQUIRE(ShardpsPull(slow, 1, 2, kBoth, seen.outs) == SHARDPS_OK);  // prefetches version 3 meanwhile
  REQUIRE(ShardpsPush(slow, 0, 2, kBoth, grads) == SHARDPS_OK);       // computed on version 0: staleness 3
  Weights after;
  REQUIRE(ShardpsPull(fast, 3, 2, kBoth, after.outs) == SHARDPS_OK);
  REQUIRE(ShardpsClientFree(fast) == SHARDPS_OK);
  REQUIRE(ShardpsClientFree(slow) == SHARDPS_OK);
  return after;
}

TEST_CASE("a slow worker's stale push is damped by num_workers / (1 + staleness)", "[async][staleness]") {
  SECTION("capped (the default): staleness 3 gives 2 / 4 of lr / 2, -1") {
    CHECK(SlowAfterThreeFast("capped").All(-6.0f - 1.0f));
  }
  SECTION("none: the slow push counts as a fresh one, -2") {
    CHECK(SlowAfterThreeFast("none").All(-6.0f - 2.0f));
  }
}

}  // namespace
}  // namespace shardps::testing
