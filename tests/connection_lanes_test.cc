// client/server_connection.h, Lane: with two or more channels per server a
// worker's pushes take a TCP connection of their own and every other call
// the others; with one channel all share it. Seen from the server, over real
// gRPC on loopback: its trace names the peer (address and port, so the
// connection) that each push came from and each pull was answered to.
#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <string>

#include "common/trace.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// The peers ("ipv4:127.0.0.1:port") of the trace's events named "<what> from <peer>".
std::set<std::string> Peers(const std::string& json, const std::string& what) {
  std::set<std::string> peers;
  const std::regex event("\"name\": \"" + what + " from ([^\"]+)\"");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), event); it != std::sregex_iterator(); ++it) {
    peers.insert((*it)[1].str());
  }
  return peers;
}

struct Connections {
  std::set<std::string> pushes, answers;
};

// One worker of a 1-server sync job, with `channels` per server, pushes and
// pulls six steps; the connections the server saw each kind of call on.
Connections RunSixSteps(int channels) {
  Trace trace("ps_server 0");
  HostOptions host;
  host.trace = &trace;
  Connections seen;
  {
    TestCluster cluster(SyncOptions(1, 1), host);
    ClientOptions options = cluster.ClientFor(0);
    options.channels_per_server = channels;
    auto worker = cluster.Worker(options);
    const auto w = TrainOnes(*worker, 6);
    REQUIRE(w.ok());
    REQUIRE(AllEqual(*w, -6));  // lr 1: six steps of gradient 1
    worker->Shutdown();
  }
  const std::string json = trace.Json();
  seen.pushes = Peers(json, "push");
  seen.answers = Peers(json, "answer");
  return seen;
}

bool Disjoint(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& x : a) {
    if (b.count(x) != 0) return false;
  }
  return true;
}

TEST_CASE("pushes have a connection of their own; pulls share the others", "[lanes]") {
  SECTION("three channels: one for pushes, two for the rest") {
    const Connections c = RunSixSteps(3);
    CHECK(c.pushes.size() == 1);
    CHECK(c.answers.size() == 2);
    CHECK(Disjoint(c.pushes, c.answers));
  }
  SECTION("two channels: one each") {
    const Connections c = RunSixSteps(2);
    CHECK(c.pushes.size() == 1);
    CHECK(c.answers.size() == 1);
    CHECK(Disjoint(c.pushes, c.answers));
  }
  SECTION("one channel carries everything") {
    const Connections c = RunSixSteps(1);
    CHECK(c.pushes.size() == 1);
    CHECK(c.pushes == c.answers);
  }
}

}  // namespace
}  // namespace shardps::testing
