// A slow link: every byte between the worker and the servers, and between
// the servers, is held 300 ms each way (tcp_proxy --delay), so a connection's
// TCP and HTTP/2 handshake takes 0.6 s at least. A replicated sync job of two
// real ps_server processes and one worker (the C API) must still connect,
// train a step and answer its pull, which waits for the backup's copy over
// the slow server-to-server link. Until 2026-11-27 every channel gave a
// handshake 100-250 ms and dropped it after that (common/reconnect_args.h):
// this job never registered.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/c_api.h"
#include "common/metrics_http.h"
#include "tests/server_process.h"

namespace shardps::testing {
namespace {

constexpr int kServers = 2;
const char* const kNames[] = {"w"};
const int kNdims[] = {1};
const int64_t kDims[] = {8};
const int kOnly[] = {0};

// A client made from `config` and registered; *took is how long the
// registration took.
ShardpsClientHandle RegisteredClient(const std::string& config, absl::Duration* took) {
  ShardpsClientHandle client = nullptr;
  REQUIRE(ShardpsClientCreate(config.c_str(), 1, kNames, kNdims, kDims, &client) == SHARDPS_OK);
  const absl::Time start = absl::Now();
  int64_t step = -1;
  const int registered = ShardpsClientRegister(client, &step);
  *took = absl::Now() - start;
  INFO(ShardpsLastError());
  REQUIRE(registered == SHARDPS_OK);
  return client;
}

// Inits the job at zeros, pushes `grad` everywhere for step 0 and pulls
// step 1: lr 1 makes every weight -grad. Frees the client.
void TrainOneStep(ShardpsClientHandle client, float grad) {
  std::vector<float> zeros(8, 0.0f), grads(8, grad), weights(8, 1.0f);
  const float* init[] = {zeros.data()};
  const float* push[] = {grads.data()};
  float* pull[] = {weights.data()};
  int applied = 0;
  REQUIRE(ShardpsClientInit(client, init, &applied) == SHARDPS_OK);
  REQUIRE(ShardpsPush(client, 0, 1, kOnly, push) == SHARDPS_OK);
  REQUIRE(ShardpsPull(client, 1, 1, kOnly, pull) == SHARDPS_OK);
  CHECK(weights == std::vector<float>(8, -grad));
  REQUIRE(ShardpsClientFree(client) == SHARDPS_OK);
}

// Two replicated sync servers (plain SGD, lr 1, 8-byte keys), each behind a
// tcp_proxy that holds every byte `delay` each way; `extra` flags go to
// both servers. Every address the worker and the servers know is a
// proxy's.
struct SlowPair {
  SlowPair(const std::string& delay, const std::vector<std::string>& extra) {
    for (int i = 0; i < kServers; ++i) {
      std::vector<std::string> flags{"--port=0", "--metrics_port=0", "--num_workers=1", "--mode=sync",
                                     "--optimizer=sgd", "--lr=1", "--partition_bytes=8", "--replicas=2",
                                     absl::StrCat("--num_servers=", kServers), absl::StrCat("--server_id=", i),
                                     "--log_level=warn"};
      flags.insert(flags.end(), extra.begin(), extra.end());
      servers.push_back(std::make_unique<ServerProcess>(RunfilePath("server/ps_server"), flags));
      proxies.push_back(std::make_unique<ServerProcess>(
          RunfilePath("tests/chaos/tcp_proxy"),
          std::vector<std::string>{absl::StrCat("--target=127.0.0.1:", servers.back()->port()), "--delay=" + delay}));
      absl::StrAppend(&addresses, i ? "," : "", "127.0.0.1:", proxies.back()->port());
    }
  }
  // The C API config of the job's worker, with `extra` flags.
  std::string Config(const std::string& extra) const {
    return absl::StrCat("--servers=", addresses, " --rank=0 --num_workers=1 --mode=sync --replicas=2",
                        " --partition_bytes=8 ", extra);
  }
  std::vector<std::unique_ptr<ServerProcess>> servers, proxies;
  std::string addresses;
};

TEST_CASE("a job whose links take 0.6 s to shake hands connects, replicates and trains", "[slow_link]") {
  SlowPair job("300ms", {});
  absl::Duration took;
  ShardpsClientHandle client = RegisteredClient(job.Config("--server_timeout=20s"), &took);
  CHECK(took >= absl::Milliseconds(600));  // the premise: the link is slow
  // Step 1's weights are answered only once each key's backup holds them:
  // the primary's copy crossed the slow link between the servers.
  TrainOneStep(client, 4.0f);
}

// Slower than the connect timeout: with 1.5 s each way the server's HTTP/2
// settings reach the worker 1.5 s after it connects, and its connection
// attempts first wait 1 s for them (common/reconnect_args.h). After three
// such attempts have failed they wait 2 s, so the worker connects in the
// end; with the timeout fixed it never did, whatever --server_timeout
// allowed. (Dropping the replaced channels on a gRPC callback thread also
// crashed this test in 2 of 8 runs; they now close on the heartbeat thread
// once no call holds them: ServerConnection::Retire.)
TEST_CASE("a worker whose handshakes take longer than the connect timeout connects in the end", "[slow_link]") {
  ServerProcess server(RunfilePath("server/ps_server"),
                       {"--port=0", "--num_workers=1", "--mode=sync", "--optimizer=sgd", "--lr=1",
                        "--partition_bytes=8", "--num_servers=1", "--server_id=0", "--log_level=warn"});
  ServerProcess proxy(RunfilePath("tests/chaos/tcp_proxy"),
                      {absl::StrCat("--target=127.0.0.1:", server.port()), "--delay=1500ms"});
  const std::string config = absl::StrCat("--servers=127.0.0.1:", proxy.port(),
                                          " --rank=0 --num_workers=1 --mode=sync --partition_bytes=8"
                                          " --server_timeout=60s");
  absl::Duration took;
  ShardpsClientHandle client = RegisteredClient(config, &took);
  CHECK(took >= absl::Seconds(3));  // three 1 s attempts failed first
  TrainOneStep(client, 2.0f);
}

// The value of `family` for server `s` in a metrics page; -1 if absent.
double MetricOf(const std::string& page, const std::string& family, int s) {
  const std::string prefix = absl::StrCat(family, "{server=\"", s, "\"} ");
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    double value = 0;
    if (absl::ConsumePrefix(&line, prefix) && absl::SimpleAtod(line, &value)) return value;
  }
  return -1;
}

// Between the servers, 1.5 s each way: a server's HTTP/2 settings reach
// the side that connects 1.5 s after it connects, later than the servers'
// default connect timeout of 1 s (common/reconnect_args.h). The worker
// lengthens its own timeout and connects; the backup link keeps the
// server's, --peer_connect_timeout. With 5 s every key has its backup after
// a step. With the default the servers never connect to each other (the
// next case). Every process's --server_timeout_for_failover is above what
// a call takes on these links (docs/failures.md, "Links between servers").
TEST_CASE("servers whose handshakes take 1.5 s replicate with --peer_connect_timeout=5s", "[slow_link]") {
  SlowPair job("1500ms", {"--server_timeout_for_failover=15s", "--peer_connect_timeout=5s"});
  absl::Duration took;
  TrainOneStep(RegisteredClient(job.Config("--server_timeout=90s --server_timeout_for_failover=15s"), &took), 3.0f);
  for (int i = 0; i < kServers; ++i) {
    const std::string page = ScrapeLoopbackMetrics(job.servers[i]->metrics_port());
    INFO("server " << i << "\n" << page);
    CHECK(MetricOf(page, "shardps_under_replicated_keys", i) == 0);
    CHECK(MetricOf(page, "shardps_replica_keys_installed_total", i) >= 1);  // the other server's keys
  }
}

// The same links with the servers' default connect timeout: the servers
// never reach each other, while the worker reaches both. Server 0 takes
// its backup, server 1, for failed after --server_timeout_for_failover;
// server 1 would take server 0 for failed only after twice that
// (server/grpc_replica_link.h, SilenceBeforeFailed), and by then the
// worker has moved server 1's keys to server 0. The job trains on with one
// copy of every key. A race the lower id wins when the timeout exceeds the
// time the news takes to reach server 1 (server 0's answer to the worker,
// then the heartbeat the worker sends at once: a round trip, 3 s here,
// against 8 s). Until 2026-11-27 both named each other failed at the
// same moment, both stepped down, and the worker's pull failed after
// --server_timeout.
TEST_CASE("two servers that cannot reach each other: the lower id serves every key, training goes on",
          "[slow_link]") {
  SlowPair job("1500ms", {"--server_timeout_for_failover=8s"});
  absl::Duration took;
  ShardpsClientHandle client =
      RegisteredClient(job.Config("--server_timeout=90s --server_timeout_for_failover=8s"), &took);
  std::vector<float> zeros(8, 0.0f), grads(8, 2.0f), weights(8, 1.0f);
  const float* init[] = {zeros.data()};
  const float* push[] = {grads.data()};
  float* pull[] = {weights.data()};
  int applied = 0;
  REQUIRE(ShardpsClientInit(client, init, &applied) == SHARDPS_OK);
  for (int64_t step = 0; step < 2; ++step) {
    int pushed = ShardpsPush(client, step, 1, kOnly, push);
    int pulled = pushed == SHARDPS_OK ? ShardpsPull(client, step + 1, 1, kOnly, pull) : pushed;
    INFO("step " << step << ": " << ShardpsLastError());
    REQUIRE(pushed == SHARDPS_OK);
    REQUIRE(pulled == SHARDPS_OK);
  }
  CHECK(weights == std::vector<float>(8, -4.0f));  // two steps of lr 1, nothing lost
  REQUIRE(ShardpsClientFree(client) == SHARDPS_OK);
  const std::string page = ScrapeLoopbackMetrics(job.servers[0]->metrics_port());
  INFO(page);
  // Server 1 stepped down; it then joins again by itself, and stays failed
  // or joining while the servers cannot reach each other.
  CHECK(MetricOf(page, "shardps_failed_servers", 0) + MetricOf(page, "shardps_joining_servers", 0) == 1);
  CHECK(MetricOf(page, "shardps_under_replicated_keys", 0) == 4);  // every key, one copy
}

}  // namespace
}  // namespace shardps::testing
