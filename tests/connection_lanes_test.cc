// client/server_connection.h, Lane: with two or more channels per server a
// worker's pushes take a TCP connection of their own and every other call
// the others; with one channel all share it. Seen from the server, over real
// gRPC on loopback: its trace names the peer (address and port, so the
// connection) that each push came from and each pull was answered to.
// Fetches take turns over the others in a rotation of their own, so their
// answers spread evenly whatever awaits and heartbeats come between.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <utility>

#include "common/trace.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// How many of the trace's events named "<what> from <peer>" each peer
// ("ipv4:127.0.0.1:port") has.
std::map<std::string, int> Peers(const std::string& json, const std::string& what) {
  std::map<std::string, int> peers;
  const std::regex event("\"name\": \"" + what + " from ([^\"]+)\"");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), event); it != std::sregex_iterator(); ++it) {
    ++peers[(*it)[1].str()];
  }
  return peers;
}

struct Connections {
  std::map<std::string, int> pushes, answers;
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

bool Disjoint(const std::map<std::string, int>& a, const std::map<std::string, int>& b) {
  for (const auto& [peer, n] : a) {
    if (b.count(peer) != 0) return false;
  }
  return true;
}

// The most and the fewest answers one connection carried.
std::pair<int, int> Spread(const std::map<std::string, int>& answers) {
  std::pair<int, int> most_fewest{0, 1 << 30};
  for (const auto& [peer, n] : answers) {
    most_fewest = {std::max(most_fewest.first, n), std::min(most_fewest.second, n)};
  }
  return most_fewest;
}

TEST_CASE("pushes have a connection of their own; pulls share the others", "[lanes]") {
  SECTION("three channels: one for pushes, two for the rest") {
    const Connections c = RunSixSteps(3);
    CHECK(c.pushes.size() == 1);
    CHECK(c.answers.size() == 2);
    CHECK(Disjoint(c.pushes, c.answers));
    // Fetches take turns whatever awaits and heartbeats come between them.
    const auto [most, fewest] = Spread(c.answers);
    CHECK(most - fewest <= 1);
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
    CHECK(c.answers.size() == 1);
    CHECK(!Disjoint(c.pushes, c.answers));
  }
}

}  // namespace
}  // namespace shardps::testing
