// The queueing priority (SO_PRIORITY) of one of this process's TCP
// connections, found by its peer's address as gRPC names it. gRPC gives a
// server no handle on the socket a call came in on, only the peer; this finds
// the socket among the process's descriptors (/proc/self/fd). ps_server uses
// it to lift the connections that carry pushes out of the bulk band its
// connections start in (README, "Scaling"): their acknowledgements, and the
// TCP acknowledgements of the pushes themselves, then no longer queue behind
// the server's answers on the host's uplink.
#ifndef SHARDPS_COMMON_CONNECTION_PRIORITY_H_
#define SHARDPS_COMMON_CONNECTION_PRIORITY_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

// This process's open file descriptors (/proc/self/fd); empty when unreadable.
std::vector<int> OpenDescriptors();

// SO_PRIORITY of socket `fd`: set (true when it took), and read (-1 when it
// cannot be).
bool SetSocketPriority(int fd, int priority);
int SocketPriorityOf(int fd);

// gRPC's name of the peer of connected socket `fd` ("ipv4:10.0.0.2:41234",
// "ipv6:[::1]:41234"); empty when it has none.
std::string PeerOfSocket(int fd);

// Sets SO_PRIORITY `priority` on this process's TCP connection to `peer`
// (as grpc::ServerContext::peer() gives it; "%5B"/"%5D" read as brackets).
// False when no such connection is open or the option cannot be set.
bool SetConnectionPriority(absl::string_view peer, int priority);

// Sets a priority on each connection once, the first time it is named.
class ConnectionPriorityMarker {
 public:
  explicit ConnectionPriorityMarker(int priority) : priority_(priority) {}
  void Mark(const std::string& peer);

 private:
  static constexpr size_t kMaxRemembered = 4096;  // then forgotten (and looked up again)
  const int priority_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> marked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_CONNECTION_PRIORITY_H_
