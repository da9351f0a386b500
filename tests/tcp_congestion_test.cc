// common/tcp_congestion.h: the daemons set the TCP congestion control of the
// connections they make and accept, each its own, leaving the machine's
// default alone; "auto", the default, is CUBIC where the process may set it;
// "system" keeps the machine's default; an algorithm the kernel cannot
// set is refused at start, naming the ones it can. The server's connections
// are bulk traffic (SO_PRIORITY 2) unless told otherwise, but for the one
// pushes arrive on; the worker's keep the machine's priority. Checked on the real sockets of a server and a
// worker talking over real gRPC on loopback: every TCP socket of this process
// is found in /proc/self/fd and asked (getsockopt TCP_CONGESTION, SO_PRIORITY).
#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <sys/socket.h>

#include <algorithm>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/connection_priority.h"
#include "common/tcp_congestion.h"
#include "server/parameter_server.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// Algorithms this process can set, the machine's default last if it is one.
std::vector<std::string> Settable() {
  const std::string fallback = MachineTcpCongestion();
  std::vector<std::string> names;
  for (absl::string_view name : absl::StrSplit(AvailableTcpCongestion(), ' ', absl::SkipEmpty())) {
    if (name != fallback && CheckTcpCongestion(name).ok()) names.emplace_back(name);
  }
  names.push_back(fallback);
  return names;
}

// gRPC's sockets are IPv6 ones, carrying IPv4 as mapped addresses.
int Port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

struct Connection {
  std::string algorithm;
  int priority;
  uint64_t bytes_sent;  // TCP_INFO's tcpi_bytes_sent
};

// The bytes `fd`, a TCP socket, has sent so far.
uint64_t BytesSent(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_bytes_sent : 0;
}

struct Sockets {
  std::vector<Connection> accepted;  // by the server: the local port is its port
  std::vector<Connection> opened;    // by the worker: the peer port is the server's
};

// This process's TCP connections to or from `port`, by their settings.
Sockets ConnectionsOf(int port) {
  Sockets s;
  const std::vector<int> fds = OpenDescriptors();
  REQUIRE(!fds.empty());  // stdin, stdout and stderr at least: /proc/self/fd was read
  for (int fd : fds) {
    const std::string algorithm = TcpCongestionOf(fd);
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (algorithm.empty() || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
      continue;  // not a connected TCP socket
    }
    const Connection c{algorithm, SocketPriorityOf(fd), BytesSent(fd)};
    if (Port(local) == port) s.accepted.push_back(c);
    if (Port(peer) == port) s.opened.push_back(c);
  }
  return s;
}

// A 1-server job (sync unless `server` says otherwise) whose server uses
// `server_cc` and `server_priority` and whose worker, with two channels (and
// the first-weights lane when asked), uses `worker_cc`; the settings of their
// connections after two steps, while both are up.
Sockets RunTwoSteps(const std::string& server_cc, const std::string& worker_cc,
                    int server_priority = HostOptions().socket_priority, bool first_weights_lane = false,
                    const ServerOptions& server = SyncOptions(1, 1)) {
  HostOptions host;
  host.tcp_congestion = server_cc;
  host.socket_priority = server_priority;
  TestCluster cluster(server, host);
  ClientOptions options = cluster.ClientFor(0);
  options.channels_per_server = 2;
  options.tcp_congestion = worker_cc;
  options.first_weights_lane = first_weights_lane;
  auto worker = cluster.Worker(options);
  const auto w = TrainOnes(*worker, 2);
  REQUIRE(w.ok());
  REQUIRE(AllEqual(*w, -2));  // lr 1: two steps of gradient 1
  Sockets s = ConnectionsOf(cluster.host(0)->port());
  worker->Shutdown();
  return s;
}

bool All(const std::vector<Connection>& connections, const std::string& algorithm) {
  for (const Connection& c : connections) {
    if (c.algorithm != algorithm) return false;
  }
  return !connections.empty();
}

bool AllAt(const std::vector<Connection>& connections, int priority) {
  for (const Connection& c : connections) {
    if (c.priority != priority) return false;
  }
  return !connections.empty();
}

TEST_CASE("each daemon's connections use the congestion control it was given", "[tcp_congestion]") {
  const std::vector<std::string> settable = Settable();
  // reno is built into every Linux kernel and open to every process.
  REQUIRE(settable.size() >= 2);
  const std::string system = settable.back();
  const std::string server_cc = settable[0];
  const std::string worker_cc = settable.size() >= 3 ? settable[1] : settable[0];
  INFO("server " << server_cc << ", worker " << worker_cc << ", machine default " << system);

  SECTION("given: the server's accepted connections and the worker's own, each its algorithm") {
    const Sockets s = RunTwoSteps(server_cc, worker_cc);
    CHECK(s.accepted.size() >= 2);  // one per channel (and the health probe's, if any)
    CHECK(s.opened.size() == 2);
    CHECK(All(s.accepted, server_cc));
    CHECK(All(s.opened, worker_cc));
  }
  SECTION("auto, the default: CUBIC where this process may set it, else the machine's default") {
    const bool cubic = CheckTcpCongestion("cubic").ok();  // not where only root may set it
    CHECK(ResolveTcpCongestion(kDefaultTcpCongestion) == (cubic ? "cubic" : kSystemTcpCongestion));
    const std::string expected = cubic ? "cubic" : system;
    const Sockets s = RunTwoSteps(HostOptions().tcp_congestion, ClientOptions().tcp_congestion);
    CHECK(All(s.accepted, expected));
    CHECK(All(s.opened, expected));
  }
  SECTION("system: the machine's default on both ends") {
    const Sockets s = RunTwoSteps(kSystemTcpCongestion, kSystemTcpCongestion);
    CHECK(All(s.accepted, system));
    CHECK(All(s.opened, system));
  }
}

// What starting a 1-server sync host on loopback with `host` gives.
absl::Status StartServer(HostOptions host) {
  host.address = "127.0.0.1";
  RealClock clock;
  absl::StatusOr<std::unique_ptr<ParameterServer>> core = ParameterServer::Create(SyncOptions(1, 1), &clock);
  REQUIRE(core.ok());
  return PsServerHost::Start(host, *std::move(core), &clock).status();
}

// How many of `connections` are at `priority`.
int CountAt(const std::vector<Connection>& connections, int priority) {
  int n = 0;
  for (const Connection& c : connections) n += c.priority == priority ? 1 : 0;
  return n;
}

TEST_CASE("a server's connections are bulk traffic, but for the one pushes take; a worker's keep the machine's priority",
          "[tcp_congestion]") {
  // The worker has two channels: pushes take the first, the rest the second.
  SECTION("the default: answers at TC_PRIO_BULK (2), the pushes' connection back at the machine's band") {
    CHECK(HostOptions().socket_priority == kBulkSocketPriority);
    const Sockets s = RunTwoSteps(kSystemTcpCongestion, kSystemTcpCongestion);
    REQUIRE(s.accepted.size() >= 2);
    CHECK(CountAt(s.accepted, kMachineSocketPriority) == 1);
    CHECK(CountAt(s.accepted, kBulkSocketPriority) == static_cast<int>(s.accepted.size()) - 1);
    CHECK(AllAt(s.opened, kMachineSocketPriority));
  }
  SECTION("another priority, given") {
    const Sockets s = RunTwoSteps(kDefaultTcpCongestion, kDefaultTcpCongestion, 5);
    CHECK(CountAt(s.accepted, kMachineSocketPriority) == 1);
    CHECK(CountAt(s.accepted, 5) == static_cast<int>(s.accepted.size()) - 1);
    CHECK(AllAt(s.opened, kMachineSocketPriority));
  }
  SECTION("left alone") {
    const Sockets s = RunTwoSteps(kDefaultTcpCongestion, kDefaultTcpCongestion, kKeepSocketPriority);
    CHECK(AllAt(s.accepted, kMachineSocketPriority));
  }
}

TEST_CASE("a sync worker's first-weights lane is one more connection, which the server lifts out of the bulk band",
          "[tcp_congestion]") {
  // SmallLayout's first tensor is its first weights: the one pull a step
  // names it, and so takes the lane, as do the awaits.
  SECTION("the pushes' connection and the lane lifted, the shared one bulk; the weights exact") {
    const Sockets s = RunTwoSteps(kSystemTcpCongestion, kSystemTcpCongestion, kBulkSocketPriority, true);
    CHECK(s.opened.size() == 3);
    REQUIRE(s.accepted.size() >= 3);
    CHECK(CountAt(s.accepted, kMachineSocketPriority) == 2);
    CHECK(CountAt(s.accepted, kBulkSocketPriority) == static_cast<int>(s.accepted.size()) - 2);
  }
  SECTION("another priority for the answers: the lane still at the machine's band, the shared one at it") {
    const Sockets s = RunTwoSteps(kSystemTcpCongestion, kSystemTcpCongestion, 5, true);
    CHECK(s.opened.size() == 3);
    CHECK(CountAt(s.accepted, kMachineSocketPriority) == 2);
    CHECK(CountAt(s.accepted, 5) == static_cast<int>(s.accepted.size()) - 2);
  }
  SECTION("async and ssp ignore it: two connections, the pushes' alone lifted") {
    ServerOptions ssp = SyncOptions(1, 1);
    ssp.job.mode = Mode::kSsp;
    ssp.job.staleness = 2;
    for (const ServerOptions& job : {AsyncOptions(1), ssp}) {
      const Sockets s = RunTwoSteps(kSystemTcpCongestion, kSystemTcpCongestion, kBulkSocketPriority, true, job);
      CHECK(s.opened.size() == 2);
      CHECK(CountAt(s.accepted, kMachineSocketPriority) == 1);
    }
  }
}

// The most bytes the server on `port` has sent on one of its connections at
// `priority`.
uint64_t MostSentAt(int port, int priority) {
  uint64_t most = 0;
  for (const Connection& c : ConnectionsOf(port).accepted) {
    if (c.priority == priority) most = std::max(most, c.bytes_sent);
  }
  return most;
}

TEST_CASE("only the first weights' fetches take the lane: later weights come over the shared connection",
          "[tcp_congestion]") {
  // 40 KB of first weights, then 400 KB that begin past 4% of the model.
  const Layout layout{{{"first", {10000}}, {"later", {100000}}}};
  ServerOptions job = SyncOptions(1, 1);
  job.job.partition_bytes = 64 << 10;
  HostOptions host;
  host.tcp_congestion = kSystemTcpCongestion;
  TestCluster cluster(job, host);
  ClientOptions options = cluster.ClientFor(0, layout);
  options.channels_per_server = 2;
  options.tcp_congestion = kSystemTcpCongestion;
  options.first_weights_lane = true;
  auto worker = cluster.Worker(options);
  std::vector<float> first(10000, 0.0f), later(100000, 0.0f), ones(100000, 1.0f);
  REQUIRE(worker->Init({first, later}).ok());
  REQUIRE(worker->Push(0, {{0, ones.data()}, {1, ones.data()}}).ok());
  REQUIRE(worker->Pull(1, {{1, later.data()}}).ok());  // its await takes the lane, its 400 KB the shared one
  const int port = cluster.host(0)->port();
  CHECK(MostSentAt(port, kBulkSocketPriority) >= 400000);
  CHECK(MostSentAt(port, kMachineSocketPriority) < 40000);  // acknowledgements and awaits' answers
  REQUIRE(worker->Pull(1, {{0, first.data()}}).ok());
  CHECK(MostSentAt(port, kMachineSocketPriority) >= 40000);  // the lane's
  CHECK(first[0] == -1.0f);
  CHECK(later[99999] == -1.0f);
  worker->Shutdown();
}

TEST_CASE("a backup lifts the connection its primary's updates come on out of the bulk band", "[tcp_congestion]") {
  // Sync pulls wait for the backup's answers: they must not queue behind its bulk answers to workers.
  ServerOptions o = SyncOptions(2, 1);
  o.job.replicas = 2;
  TestCluster cluster(o, HostOptions());
  ClientOptions options = cluster.ClientFor(0);
  options.channels_per_server = 2;
  auto worker = cluster.Worker(options);
  REQUIRE(TrainOnes(*worker, 2).ok());
  const Sockets s = ConnectionsOf(cluster.host(1)->port());
  worker->Shutdown();
  // Server 1's connections: the worker's two channels and server 0's replica link.
  REQUIRE(s.accepted.size() == 3);
  CHECK(CountAt(s.accepted, kMachineSocketPriority) == 2);  // the pushes' and the link's
  CHECK(CountAt(s.accepted, kBulkSocketPriority) == 1);
}

TEST_CASE("a socket priority that cannot be set is refused at start, saying what can", "[tcp_congestion]") {
  CHECK(CheckSocketPriority(kKeepSocketPriority).ok());
  CHECK(CheckSocketPriority(0).ok());
  CHECK(CheckSocketPriority(6).ok());
  const absl::Status check = CheckSocketPriority(-2);
  CHECK(check.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(check.message()), Catch::Contains("--socket_priority=-2 cannot be set here (negative)"));
  CHECK_THAT(std::string(check.message()), Catch::Contains("use 0-6"));

  HostOptions host;
  host.socket_priority = -2;
  const absl::Status started = StartServer(host);
  CHECK(started.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(started.message()), Catch::Contains("--socket_priority=-2"));
}

TEST_CASE("an algorithm the kernel cannot set is refused at start, naming the ones it can", "[tcp_congestion]") {
  const absl::Status check = CheckTcpCongestion("no-such-cc");
  CHECK(check.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(check.message()), Catch::Contains("--tcp_congestion='no-such-cc' cannot be set here"));
  CHECK_THAT(std::string(check.message()), Catch::Contains("reno"));
  CHECK_FALSE(CheckTcpCongestion("").ok());

  SECTION("a worker") {
    TestCluster cluster(SyncOptions(1, 1));
    ClientOptions options = cluster.ClientFor(0);
    options.tcp_congestion = "no-such-cc";
    const absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(options);
    REQUIRE_FALSE(client.ok());
    CHECK(client.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(client.status().message()), Catch::Contains("no-such-cc"));
  }
  SECTION("a server") {
    HostOptions host;
    host.tcp_congestion = "no-such-cc";
    const absl::Status started = StartServer(host);
    CHECK(started.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(started.message()), Catch::Contains("no-such-cc"));
  }
}

}  // namespace
}  // namespace shardps::testing
