// common/metrics_http over real sockets on 127.0.0.1: GET /metrics renders
// at each scrape, other paths and methods get clear HTTP errors, a busy port
// is named, and a client that connects and sends nothing does not stop the
// next one from being served once it leaves.
#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace shardps::testing {
namespace {

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}


TEST_CASE("metrics over HTTP: rendered at each scrape, with clear errors for anything else", "[metrics]") {
  std::atomic<int> scrapes{0};
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [&] { return absl::StrCat("scrapes ", ++scrapes, "\n"); });
  REQUIRE(server.ok());
  const int port = (*server)->port();
  REQUIRE(port > 0);

  const std::string first = HttpOnLoopback(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  REQUIRE_THAT(first, Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
  REQUIRE_THAT(first, Catch::Contains("Content-Type: text/plain; version=0.0.4"));
  REQUIRE_THAT(first, Catch::Contains("Content-Length: 10\r\n"));
  REQUIRE_THAT(first, Catch::EndsWith("\r\n\r\nscrapes 1\n"));
  REQUIRE_THAT(HttpOnLoopback(port, "GET /metrics?name[]=x HTTP/1.0\r\n\r\n"), Catch::EndsWith("scrapes 2\n"));

  REQUIRE_THAT(HttpOnLoopback(port, "GET / HTTP/1.1\r\n\r\n"), Catch::StartsWith("HTTP/1.1 404 Not Found"));
  REQUIRE_THAT(HttpOnLoopback(port, "POST /metrics HTTP/1.1\r\n\r\n"), Catch::StartsWith("HTTP/1.1 405"));
  REQUIRE_THAT(HttpOnLoopback(port, "\r\n\r\n"), Catch::StartsWith("HTTP/1.1 405"));
  REQUIRE(scrapes == 2);  // errors render nothing

  // A client that says nothing and hangs up does not stop the next one.
  const int silent = ConnectTo(port);
  REQUIRE(silent >= 0);
  close(silent);
  REQUIRE_THAT(HttpOnLoopback(port, "GET /metrics HTTP/1.1\r\n\r\n"), Catch::EndsWith("scrapes 3\n"));
}

TEST_CASE("metrics over HTTP: a busy port or a bad address is named; stopping frees the port", "[metrics]") {
  auto first = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  REQUIRE(first.ok());
  const int port = (*first)->port();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const absl::Status busy = MetricsHttpServer::Start(address, [] { return std::string(); }).status();
  REQUIRE(busy.code() == absl::StatusCode::kUnavailable);
  REQUIRE_THAT(std::string(busy.message()), Catch::Contains("cannot serve metrics on " + address));
  REQUIRE_THAT(std::string(busy.message()), Catch::Contains("Address already in use"));
  REQUIRE_THAT(std::string(MetricsHttpServer::Start("example:80", [] { return std::string(); }).status().message()),
               Catch::Contains("not an IPv4 or IPv6 address"));
  REQUIRE_THAT(std::string(MetricsHttpServer::Start("127.0.0.1", [] { return std::string(); }).status().message()),
               Catch::Contains("not host:port"));
  first->reset();
  REQUIRE(MetricsHttpServer::Start(address, [] { return std::string(); }).ok());
  // IPv6, as gRPC's --bind_address may be.
  auto six = MetricsHttpServer::Start("[::1]:0", [] { return std::string(); });
  REQUIRE(six.ok());
  REQUIRE((*six)->port() > 0);
}

}  // namespace
}  // namespace shardps::testing
