#include "common/connection_priority.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace shardps {

std::vector<int> OpenDescriptors() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (dirent* e = readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(e->d_name, &fd) && fd != dirfd(dir)) fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

bool SetSocketPriority(int fd, int priority) {
  return setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &priority, sizeof(priority)) == 0;
}

int SocketPriorityOf(int fd) {
  int priority = 0;
  socklen_t len = sizeof(priority);
  return getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &priority, &len) == 0 ? priority : -1;
}

std::string PeerOfSocket(int fd) {
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(peer);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(a.sin_port));
  }
  if (peer.ss_family != AF_INET6) return "";
  const auto& a = reinterpret_cast<const sockaddr_in6&>(peer);
  if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {  // gRPC names these as IPv4
    inet_ntop(AF_INET, &a.sin6_addr.s6_addr[12], text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(a.sin6_port));
  }
  inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
  return absl::StrCat("ipv6:[", text, "]:", ntohs(a.sin6_port));
}

bool SetConnectionPriority(absl::string_view peer, int priority) {
  const std::string want = absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"}});
  for (int fd : OpenDescriptors()) {
    if (PeerOfSocket(fd) == want) return SetSocketPriority(fd, priority);
  }
  return false;
}

void ConnectionPriorityMarker::Mark(const std::string& peer) {
  {
    absl::MutexLock lock(&mu_);
    if (marked_.size() >= kMaxRemembered) marked_.clear();
    if (!marked_.insert(peer).second) return;
  }
  SetConnectionPriority(peer, priority_);  // a connection already gone needs none
}

}  // namespace shardps
