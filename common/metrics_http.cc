#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace shardps {
namespace {

absl::Status Unavailable(const std::string& address, const std::string& why) {
  return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", why));
}

void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away
    sent += static_cast<size_t>(n);
  }
}

std::string Response(const std::string& status, const std::string& type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& address,
                                                                             std::function<std::string()> render) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return Unavailable(address, "not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &found) != 0) {
    return Unavailable(address, "not an IPv4 or IPv6 address");
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  const bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
                  bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 16) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0;
  const std::string why = ok ? "" : std::strerror(errno);
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) close(fd);
    return Unavailable(address, why);
  }
  const uint16_t net_port = bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port;
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(fd, ntohs(net_port), std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int fd, int port, std::function<std::string()> render)
    : fd_(fd), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  thread_.join();
  close(fd_);
}

void MetricsHttpServer::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, /*timeout ms=*/100) <= 0) continue;
    const int connection = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    const timeval timeout{2, 0};  // a scraper that sends nothing does not hold the endpoint
    setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Answer(connection);
    close(connection);
  }
}

void MetricsHttpServer::Answer(int connection) const {
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  const absl::string_view line = absl::string_view(request).substr(0, request.find("\r\n"));
  if (line.substr(0, 4) != "GET ") {
    WriteAll(connection, Response("405 Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  const absl::string_view path = line.substr(4, line.find(' ', 4) - 4);
  if (path != "/metrics" && path.substr(0, 9) != "/metrics?") {
    WriteAll(connection, Response("404 Not Found", "text/plain", "metrics are at /metrics\n"));
    return;
  }
  WriteAll(connection, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
}

std::string HttpOnLoopback(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    WriteAll(fd, request);
    char buffer[4096];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, static_cast<size_t>(n));
  }
  if (fd >= 0) close(fd);
  return answer;
}

std::string ScrapeLoopbackMetrics(int port) {
  return HttpOnLoopback(port, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
}

}  // namespace shardps
