// The C API (client/c_api.h) as a C caller uses it: through libshardps.so,
// against real ps_server processes. Values are small integers, so results
// compare with ==.
#include <catch2/catch.hpp>
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/c_api.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

const char* const kNames[] = {"w", "b"};
const int kNdims[] = {2, 1};
const int64_t kDims[] = {2, 3, 3};

std::vector<std::string> ServerArgs(int id, int servers, const std::string& extra = "") {
  std::vector<std::string> args = {"--port=0", absl::StrCat("--server_id=", id), absl::StrCat("--num_servers=", servers),
                                   "--num_workers=1", "--mode=sync", "--optimizer=sgd", "--lr=0.5",
                                   "--partition_bytes=8"};  // 2 floats a key: both tensors span both servers
  if (!extra.empty()) args.push_back(extra);
  return args;
}

std::string Config(const std::vector<int>& ports) {
  std::string servers;
  for (int p : ports) absl::StrAppend(&servers, servers.empty() ? "" : ",", "127.0.0.1:", p);
  return absl::StrCat("--servers=", servers, " --rank=0 --num_workers=1 --mode=sync --partition_bytes=8",
                      " --server_timeout=20s");
}

ShardpsClientHandle Connect(const std::string& config) {
  ShardpsClientHandle c = nullptr;
  const int rc = ShardpsClientCreate(config.c_str(), 2, kNames, kNdims, kDims, &c);
  INFO(ShardpsLastError());
  REQUIRE(rc == SHARDPS_OK);
  return c;
}

TEST_CASE("the C API pushes, pulls and initialises through real servers, blocking and async", "[c_api]") {
  ServerProcess s0(RunfilePath("server/ps_server"), ServerArgs(0, 2));
  ServerProcess s1(RunfilePath("server/ps_server"), ServerArgs(1, 2));
  ShardpsClientHandle c = Connect(Config({s0.port(), s1.port()}));
  int64_t step = -1;
  REQUIRE(ShardpsClientRegister(c, &step) == SHARDPS_OK);
  CHECK(step == 0);
  std::vector<float> w(6, 1.0f), b(3, 1.0f);
  const float* init[] = {w.data(), b.data()};
  int applied = 0;
  REQUIRE(ShardpsClientInit(c, init, &applied) == SHARDPS_OK);
  CHECK(applied == 1);
  REQUIRE(ShardpsClientInit(c, init, &applied) == SHARDPS_OK);  // first writer wins
  CHECK(applied == 0);

  int index = -1;
  REQUIRE(ShardpsTensorIndex(c, "b", &index) == SHARDPS_OK);
  CHECK(index == 1);
  int64_t size = 0;
  REQUIRE(ShardpsTensorSize(c, 0, &size) == SHARDPS_OK);
  CHECK(size == 6);

  // Step 0 blocking: w <- 1 - 0.5 * 2 = 0.
  std::vector<float> gw(6, 2.0f), gb(3, 4.0f);
  const int both[] = {0, 1};
  const float* grads[] = {gw.data(), gb.data()};
  REQUIRE(ShardpsPush(c, 0, 2, both, grads) == SHARDPS_OK);
  std::vector<float> pw(6, -9.0f), pb(3, -9.0f);
  float* outs[] = {pw.data(), pb.data()};
  REQUIRE(ShardpsPull(c, 1, 2, both, outs) == SHARDPS_OK);
  CHECK(pw == std::vector<float>(6, 0.0f));
  CHECK(pb == std::vector<float>(3, -1.0f));

  // Step 1 through PushThenPull: the pull of step 2 lands in `outs`.
  ShardpsCallHandle pushed = nullptr, pulled = nullptr;
  REQUIRE(ShardpsPushThenPull(c, 1, 2, both, grads, outs, &pushed, &pulled) == SHARDPS_OK);
  int done = 0;
  CHECK(ShardpsCallWait(pulled, 10.0, &done) == SHARDPS_OK);
  CHECK(done == 1);
  CHECK(ShardpsCallWait(pushed, -1, &done) == SHARDPS_OK);
  CHECK(pw == std::vector<float>(6, -1.0f));
  CHECK(pb == std::vector<float>(3, -3.0f));
  REQUIRE(ShardpsCallFree(pushed) == SHARDPS_OK);
  REQUIRE(ShardpsCallFree(pulled) == SHARDPS_OK);

  // An async pull of a step not reached yet waits; a push completes it.
  ShardpsCallHandle later = nullptr, push = nullptr;
  REQUIRE(ShardpsPullAsync(c, 3, 2, both, outs, &later) == SHARDPS_OK);
  CHECK(ShardpsCallWait(later, 0.2, &done) == SHARDPS_OK);
  CHECK(done == 0);
  REQUIRE(ShardpsPushAsync(c, 2, 2, both, grads, &push) == SHARDPS_OK);
  CHECK(ShardpsCallWait(later, 10.0, &done) == SHARDPS_OK);
  CHECK(done == 1);
  CHECK(pw == std::vector<float>(6, -2.0f));
  REQUIRE(ShardpsCallFree(push) == SHARDPS_OK);
  REQUIRE(ShardpsCallFree(later) == SHARDPS_OK);

  int64_t retries = -1, registrations = -1;
  REQUIRE(ShardpsClientStats(c, &retries, &registrations, nullptr) == SHARDPS_OK);
  CHECK(registrations == 2);
  REQUIRE(ShardpsClientFree(c) == SHARDPS_OK);
}

TEST_CASE("the C API refuses bad input with a code and a message, and the server keeps serving", "[c_api]") {
  int major = 0, minor = 0;
  REQUIRE(ShardpsVersion(&major, &minor) == SHARDPS_OK);
  CHECK(major == 1);
  CHECK(ShardpsVersion(nullptr, &minor) == SHARDPS_ERROR);
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("null"));

  ShardpsClientHandle c = nullptr;
  // Each bad option, and what the error says.
  const std::pair<const char*, const char*> bad_options[] = {
      {"--bogus=1", "unknown client option '--bogus=1'"},
      {"--async_prefetch=maybe", "option --async_prefetch=maybe: want true or false"},
      {"--http2_bdp_probe=off", "option --http2_bdp_probe=off: want true or false"},
      {"--coalesce_pushes=1", "option --coalesce_pushes=1: want true or false"},
      {"--first_weights_lane=yes", "option --first_weights_lane=yes: want true or false"},
      {"--push_request_bytes=-5", "push_request_bytes is -5; want 0 (one partition) or more"},
      {"--fetch_request_bytes=1e3", "option --fetch_request_bytes=1e3: want an integer"},
      {"--tcp_congestion=no-such-cc", "--tcp_congestion='no-such-cc' cannot be set here"},
  };
  for (const auto& [option, error] : bad_options) {
    INFO(option);
    const std::string config = absl::StrCat("--servers=127.0.0.1:1 ", option);
    CHECK(ShardpsClientCreate(config.c_str(), 2, kNames, kNdims, kDims, &c) == SHARDPS_ERROR);
    CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains(error));
  }
  CHECK(ShardpsClientCreate("--rank=0", 2, kNames, kNdims, kDims, &c) == SHARDPS_ERROR);
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("no servers"));
  const char* const twice[] = {"w", "w"};
  CHECK(ShardpsClientCreate("--servers=127.0.0.1:1", 2, twice, kNdims, kDims, &c) == SHARDPS_ERROR);
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("names tensor 'w' twice"));

  ServerProcess s0(RunfilePath("server/ps_server"), ServerArgs(0, 1));
  c = Connect(absl::StrCat("--servers=127.0.0.1:", s0.port(), " --mode=sync --partition_bytes=8"));
  int64_t step = 0;
  REQUIRE(ShardpsClientRegister(c, &step) == SHARDPS_OK);
  int index = 0;
  CHECK(ShardpsTensorIndex(c, "nope", &index) == SHARDPS_ERROR);
  CHECK(ShardpsLastErrorCode() == 5);  // NOT_FOUND
  std::vector<float> w(6), b(3);
  float* outs[] = {w.data(), b.data()};
  const int both[] = {0, 1};
  CHECK(ShardpsPull(c, 0, 2, both, outs) == SHARDPS_ERROR);  // before anyone's Init
  CHECK(ShardpsLastErrorCode() == 9);                          // FAILED_PRECONDITION
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("not initialised"));
  const int missing[] = {7};
  CHECK(ShardpsPull(c, 0, 1, missing, outs) == SHARDPS_ERROR);
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("tensor index 7 is not in the layout"));
  CHECK(ShardpsPush(nullptr, 0, 1, both, nullptr) == SHARDPS_ERROR);
  CHECK_THAT(std::string(ShardpsLastError()), Catch::Contains("client handle is null"));
  // The server still serves: Init and a pull work.
  const float* init[] = {w.data(), b.data()};
  REQUIRE(ShardpsClientInit(c, init, nullptr) == SHARDPS_OK);
  CHECK(ShardpsPull(c, 0, 2, both, outs) == SHARDPS_OK);
  REQUIRE(ShardpsClientFree(c) == SHARDPS_OK);
}

// A client's last answers finish on gRPC's threads. Freeing the client just
// after must wait until they have let go of every gRPC object: the next
// server this process forks (fork runs gRPC's fork handlers) or client it
// makes raced gRPC's teardown and aborted in ref_counted.h, now and then.
TEST_CASE("a process frees clients as their last answers come in, then forks and connects again, many times over",
          "[c_api]") {
  std::vector<float> w(6, 1.0f), b(3, 1.0f);
  float* outs[] = {w.data(), b.data()};
  const float* values[] = {w.data(), b.data()};
  const int both[] = {0, 1};
  int failures = 0;
  for (int round = 0; round < 30; ++round) {
    ServerProcess server(RunfilePath("server/ps_server"), ServerArgs(0, 1));
    ShardpsClientHandle c =
        Connect(absl::StrCat("--servers=127.0.0.1:", server.port(), " --mode=sync --partition_bytes=8"));
    int64_t step = 0;
    if (ShardpsClientRegister(c, &step) != SHARDPS_OK) ++failures;
    if (ShardpsPull(c, 0, 2, both, outs) != SHARDPS_ERROR) ++failures;  // five refusals: not initialised
    if (ShardpsClientInit(c, values, nullptr) != SHARDPS_OK) ++failures;
    if (ShardpsPull(c, 0, 2, both, outs) != SHARDPS_OK) ++failures;  // five answers, then the client goes
    if (ShardpsClientFree(c) != SHARDPS_OK) ++failures;
  }
  CHECK(failures == 0);
}

TEST_CASE("after a server restart a push says REJOIN, and registering again gives the step to continue at",
          "[c_api]") {
  const std::string dir = TempDir("c_api_rejoin");
  const std::string ckpt = "--checkpoint_dir=" + dir;
  auto args = ServerArgs(0, 1, ckpt);
  args.push_back("--checkpoint_every=1");
  auto server = std::make_unique<ServerProcess>(RunfilePath("server/ps_server"), args);
  const int port = server->port();
  ShardpsClientHandle c = Connect(absl::StrCat("--servers=127.0.0.1:", port, " --mode=sync --partition_bytes=8"));
  int64_t step = 0;
  REQUIRE(ShardpsClientRegister(c, &step) == SHARDPS_OK);
  std::vector<float> w(6, 1.0f), b(3, 1.0f);
  const float* values[] = {w.data(), b.data()};
  REQUIRE(ShardpsClientInit(c, values, nullptr) == SHARDPS_OK);
  const int both[] = {0, 1};
  REQUIRE(ShardpsPush(c, 0, 2, both, values) == SHARDPS_OK);
  float* outs[] = {w.data(), b.data()};
  REQUIRE(ShardpsPull(c, 1, 2, both, outs) == SHARDPS_OK);
  server->Signal(SIGKILL);
  args[0] = absl::StrCat("--port=", port);
  server = std::make_unique<ServerProcess>(RunfilePath("server/ps_server"), args);
  CHECK(ShardpsPush(c, 1, 2, both, values) == SHARDPS_REJOIN);
  INFO(ShardpsLastError());
  REQUIRE(ShardpsClientRegister(c, &step) == SHARDPS_OK);
  // The job rewound to the newest step every server holds a checkpoint of:
  // 0 (written at Init) or 1 (if its checkpoint was on disk before the kill).
  CHECK((step == 0 || step == 1));
  CHECK(ShardpsPush(c, step, 2, both, values) == SHARDPS_OK);
  CHECK(ShardpsPull(c, step + 1, 2, both, outs) == SHARDPS_OK);
  REQUIRE(ShardpsClientFree(c) == SHARDPS_OK);
}

}  // namespace
}  // namespace shardps::testing
