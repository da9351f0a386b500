#include "bench/baselines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps {
namespace {

absl::Status Errno(const char* what) { return absl::InternalError(absl::StrCat(what, ": ", strerror(errno))); }

// A listening socket on 127.0.0.1 at an ephemeral port, written to `addr`.
absl::StatusOr<int> Listen(sockaddr_in& addr, int backlog) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, backlog) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return Errno("bind/listen");
  }
  return listener;
}

// Sends or receives exactly `n` bytes; false when the peer is gone.
bool SendAll(int fd, const char* p, int64_t n) {
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= k;
  }
  return true;
}
bool ReceiveAll(int fd, char* p, int64_t n) {
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= k;
  }
  return true;
}

}  // namespace

double MemcpyBytesPerSecond(int64_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes, 2);
  std::vector<double> seconds;
  for (int r = 0; r < 11; ++r) {
    const absl::Time start = absl::Now();
    std::memcpy(to.data(), from.data(), bytes);
    if (r >= 2) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));  // two to warm up
    from[r] = to[bytes - 1 - r];  // the copies stay observable
  }
  std::sort(seconds.begin(), seconds.end());
  return bytes / seconds[seconds.size() / 2];
}

absl::StatusOr<double> LoopbackTcpBytesPerSecond(int64_t total_bytes) {
  sockaddr_in addr;
  absl::StatusOr<int> listening = Listen(addr, 1);
  if (!listening.ok()) return listening.status();
  const int listener = *listening;
  const int sender = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sender, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(listener);
    close(sender);
    return Errno("connect");
  }
  const int receiver = accept(listener, nullptr, nullptr);
  close(listener);
  if (receiver < 0) {
    close(sender);
    return Errno("accept");
  }
  constexpr size_t kBlock = 1 << 20;
  std::vector<char> out(kBlock, 1), in(kBlock);
  const absl::Time start = absl::Now();
  std::thread send_thread([&] {
    for (int64_t sent = 0; sent < total_bytes;) {
      const ssize_t n = send(sender, out.data(), std::min<int64_t>(kBlock, total_bytes - sent), 0);
      if (n <= 0) break;
      sent += n;
    }
  });
  int64_t received = 0;
  while (received < total_bytes) {
    const ssize_t n = recv(receiver, in.data(), kBlock, 0);
    if (n <= 0) break;
    received += n;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  send_thread.join();
  close(sender);
  close(receiver);
  if (received < total_bytes) return absl::InternalError("loopback stream ended early");
  return received / seconds;
}

absl::StatusOr<double> LoopbackPushPullSeconds(int64_t bytes, int connections, int repeats) {
  if (connections < 1 || repeats < 1 || bytes < connections) return absl::InvalidArgumentError("bad push+pull baseline");
  sockaddr_in addr;
  absl::StatusOr<int> listening = Listen(addr, connections);
  if (!listening.ok()) return listening.status();
  std::vector<int> clients, servers;
  absl::Status status;
  for (int c = 0; c < connections && status.ok(); ++c) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      status = Errno("connect");
      if (fd >= 0) close(fd);
      break;
    }
    clients.push_back(fd);
    const int peer = accept(*listening, nullptr, nullptr);
    if (peer < 0) {
      status = Errno("accept");
      break;
    }
    servers.push_back(peer);
  }
  close(*listening);
  const int64_t share = bytes / connections;
  const int rounds = repeats + 2;  // the first two warm the buffers up
  std::vector<double> seconds;
  if (status.ok()) {
    // The server side: read a push whole, answer with as many bytes.
    std::vector<std::thread> answerers;
    for (int fd : servers) {
      answerers.emplace_back([fd, share, rounds] {
        std::vector<char> in(share), weights(share, 1);
        for (int r = 0; r < rounds; ++r) {
          if (!ReceiveAll(fd, in.data(), share) || !SendAll(fd, weights.data(), share)) return;
        }
      });
    }
    std::vector<std::vector<char>> grads(connections, std::vector<char>(share, 2)), out(connections,
                                                                                       std::vector<char>(share));
    for (int r = 0; r < rounds && status.ok(); ++r) {
      const absl::Time start = absl::Now();
      std::vector<std::thread> lanes;
      std::vector<char> ok(connections, 0);
      for (int c = 0; c < connections; ++c) {
        lanes.emplace_back([&, c] {
          ok[c] = SendAll(clients[c], grads[c].data(), share) && ReceiveAll(clients[c], out[c].data(), share);
        });
      }
      for (auto& t : lanes) t.join();
      if (std::count(ok.begin(), ok.end(), 0) > 0) status = absl::InternalError("push+pull baseline: a connection ended early");
      if (r >= 2) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    for (int fd : clients) shutdown(fd, SHUT_RDWR);
    for (auto& t : answerers) t.join();
  }
  for (int fd : clients) close(fd);
  for (int fd : servers) close(fd);
  if (!status.ok()) return status;
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace shardps
