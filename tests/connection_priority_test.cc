// common/connection_priority.h: a TCP connection of this process is found by
// its peer as gRPC names it (IPv4, IPv4 mapped into IPv6, IPv6 with brackets
// or with gRPC's %5B/%5D) and gets the priority asked for; a peer with no
// connection is reported, not guessed; a marker sets each peer once. Real
// loopback sockets.
#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/connection_priority.h"
#include "common/tcp_congestion.h"

namespace shardps {
namespace {

// A connected pair on loopback: `client` and the `accepted` end.
struct Pair {
  int listener = -1, client = -1, accepted = -1;
  ~Pair() {
    for (int fd : {listener, client, accepted}) {
      if (fd >= 0) close(fd);
    }
  }
};

// `family` AF_INET or AF_INET6; `mapped`: an IPv6 listener reached over IPv4
// (how gRPC's dual-stack sockets see IPv4 peers).
void Connect(int family, bool mapped, Pair* p) {
  p->listener = socket(family, SOCK_STREAM, 0);
  REQUIRE(p->listener >= 0);
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET) {
    auto& a = reinterpret_cast<sockaddr_in&>(addr);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(a);
  } else {
    auto& a = reinterpret_cast<sockaddr_in6&>(addr);
    a.sin6_family = AF_INET6;
    a.sin6_addr = mapped ? in6addr_any : in6addr_loopback;
    len = sizeof(a);
  }
  REQUIRE(bind(p->listener, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(listen(p->listener, 1) == 0);
  REQUIRE(getsockname(p->listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  if (mapped) {  // dial the IPv6 listener's port over IPv4
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_port = reinterpret_cast<sockaddr_in6&>(addr).sin6_port;
    v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    p->client = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(p->client, reinterpret_cast<sockaddr*>(&v4), sizeof(v4)) == 0);
  } else {
    p->client = socket(family, SOCK_STREAM, 0);
    REQUIRE(connect(p->client, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  p->accepted = accept(p->listener, nullptr, nullptr);
  REQUIRE(p->accepted >= 0);
}

// The client's own address as gRPC names a peer.
std::string LocalName(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0);
  if (local.ss_family == AF_INET) {
    return absl::StrCat("ipv4:127.0.0.1:", ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port));
  }
  return absl::StrCat("ipv6:[::1]:", ntohs(reinterpret_cast<sockaddr_in6&>(local).sin6_port));
}

TEST_CASE("a connection found by its peer's gRPC name gets the priority asked for", "[connection_priority]") {
  Pair p;
  SECTION("IPv4") { Connect(AF_INET, false, &p); }
  SECTION("IPv4 seen by an IPv6 socket (mapped), named as IPv4 as gRPC does") { Connect(AF_INET6, true, &p); }
  SECTION("IPv6") { Connect(AF_INET6, false, &p); }
  const std::string peer = LocalName(p.client);
  INFO(peer);
  CHECK(PeerOfSocket(p.accepted) == peer);
  CHECK(SocketPriorityOf(p.accepted) == kMachineSocketPriority);
  REQUIRE(SetConnectionPriority(peer, 3));
  CHECK(SocketPriorityOf(p.accepted) == 3);
  CHECK(SocketPriorityOf(p.client) == kMachineSocketPriority);  // the other end is not touched
  // gRPC writes IPv6 brackets percent-encoded in some versions.
  REQUIRE(SetConnectionPriority(absl::StrReplaceAll(peer, {{"[", "%5B"}, {"]", "%5D"}}), 4));
  CHECK(SocketPriorityOf(p.accepted) == 4);
}

TEST_CASE("a peer with no connection is reported, and nothing is set", "[connection_priority]") {
  Pair p;
  Connect(AF_INET, false, &p);
  CHECK_FALSE(SetConnectionPriority("ipv4:127.0.0.1:1", 3));
  CHECK_FALSE(SetConnectionPriority("not a peer", 3));
  CHECK(SocketPriorityOf(p.accepted) == kMachineSocketPriority);
  CHECK(PeerOfSocket(p.listener).empty());  // listening: no peer
}

TEST_CASE("a marker sets each connection's priority the first time it is named", "[connection_priority]") {
  Pair p;
  Connect(AF_INET, false, &p);
  ConnectionPriorityMarker marker(5);
  marker.Mark(LocalName(p.client));
  CHECK(SocketPriorityOf(p.accepted) == 5);
  // Changed by someone else afterwards: a second mark of the same peer leaves it.
  const int other = 1;
  REQUIRE(setsockopt(p.accepted, SOL_SOCKET, SO_PRIORITY, &other, sizeof(other)) == 0);
  marker.Mark(LocalName(p.client));
  CHECK(SocketPriorityOf(p.accepted) == 1);
}

}  // namespace
}  // namespace shardps
