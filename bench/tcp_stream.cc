#include "bench/tcp_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps {
namespace {

absl::Status Errno(const char* what) { return absl::InternalError(absl::StrCat(what, ": ", strerror(errno))); }

}  // namespace

absl::StatusOr<double> LoopbackTcpBytesPerSecond(int64_t total_bytes) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(listener);
    return Errno("bind/listen");
  }
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

}  // namespace shardps
