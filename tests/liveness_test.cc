// DESIGN.md "Liveness": a dead worker never hangs a sync step, is counted,
// and a returning worker rejoins at the current step.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <thread>

#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// GET /metrics from 127.0.0.1:port; the whole response.
std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST_CASE("worker timeout: a sync step completes without a silent worker, which rejoins", "[liveness]") {
  ServerOptions o = SyncOptions(1, 3);
  o.worker_timeout = absl::Milliseconds(600);
  HostOptions host;
  host.metrics_port = 0;
  TestCluster cluster(o, host);
  auto w0 = cluster.Worker(0);
  auto w1 = cluster.Worker(1);
  auto w2 = cluster.Worker(2);
  REQUIRE(w0->Init(Zeros(SmallLayout())).ok());
  w2.reset();  // worker 2 goes silent: no calls, no heartbeats

  auto g = Filled(3);
  REQUIRE(w0->Push(0, {{0, g[0].data()}, {1, g[1].data()}}).ok());
  REQUIRE(w1->Push(0, {{0, g[0].data()}, {1, g[1].data()}}).ok());
  auto w = Zeros(SmallLayout());
  const absl::Time start = absl::Now();
  REQUIRE(w0->Pull(1, {{0, w[0].data()}, {1, w[1].data()}}).ok());
  REQUIRE(absl::Now() - start >= absl::Milliseconds(300));  // it waited for the timeout
  REQUIRE(w[0][0] == -3.0f);                                 // mean of the two live workers

  const ServerStats stats = cluster.core(0)->Stats();
  REQUIRE(stats.dead_workers_total == 1);
  REQUIRE(stats.live_workers == 2);
  const std::string metrics = ScrapeMetrics(cluster.host(0)->metrics_port());
  REQUIRE_THAT(metrics, Catch::Contains("shardps_dead_workers_total{server=\"0\"} 1"));
  REQUIRE_THAT(metrics, Catch::Contains("shardps_live_workers{server=\"0\"} 2"));

  // Worker 2 comes back: it registers again and continues at step 1.
  auto back = PsClient::Connect(cluster.ClientFor(2));
  REQUIRE(back.ok());
  absl::StatusOr<int64_t> step = (*back)->Register();
  REQUIRE(step.ok());
  REQUIRE(*step == 1);
  auto g2 = Filled(6);
  std::thread other([&] {
    REQUIRE(w0->Push(1, {{0, g[0].data()}, {1, g[1].data()}}).ok());
    REQUIRE(w1->Push(1, {{0, g[0].data()}, {1, g[1].data()}}).ok());
  });
  REQUIRE((*back)->Push(1, {{0, g2[0].data()}, {1, g2[1].data()}}).ok());
  other.join();
  REQUIRE((*back)->Pull(2, {{0, w[0].data()}, {1, w[1].data()}}).ok());
  REQUIRE(w[0][0] == -3.0f - 4.0f);  // mean of 3, 3, 6: all three counted again
  REQUIRE(cluster.core(0)->Stats().live_workers == 3);
}

TEST_CASE("an idle worker's heartbeats keep it alive", "[liveness]") {
  ServerOptions o = SyncOptions(1, 1);
  o.worker_timeout = absl::Milliseconds(1500);
  TestCluster cluster(o);
  auto w = cluster.Worker(0);  // heartbeat interval 100 ms
  REQUIRE(w->Init(Zeros(SmallLayout())).ok());
  absl::SleepFor(absl::Milliseconds(4000));  // well past the timeout, with no other calls
  REQUIRE(cluster.core(0)->Stats().dead_workers_total == 0);
}

TEST_CASE("a worker that never registers does not hang the first sync step", "[liveness]") {
  ServerOptions o = SyncOptions(1, 2);
  o.worker_timeout = absl::Milliseconds(500);
  TestCluster cluster(o);
  auto w = cluster.Worker(0);
  REQUIRE(w->Init(Zeros(SmallLayout())).ok());
  auto g = Filled(1);
  REQUIRE(w->Push(0, {{0, g[0].data()}, {1, g[1].data()}}).ok());
  auto out = Zeros(SmallLayout());
  REQUIRE(w->Pull(1, {{0, out[0].data()}, {1, out[1].data()}}).ok());
  REQUIRE(out[1][0] == -1.0f);
}

}  // namespace
}  // namespace shardps::testing
