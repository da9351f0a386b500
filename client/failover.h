// The worker's side of replication (DESIGN.md, "Replication";
// common/replica_map.h): which servers have failed, which connection serves
// a failed server's keys, and the sync pushes to push again there.
//
// A server is taken for failed when a transfer to it is refused, reset or
// closed (kill -9: common/grpc_status.h, PeerProcessGone), when it has not
// answered for --server_timeout_for_failover (a connection not set up in
// time among it), or when any server's answer says so (trailing metadata).
// Every request then carries the failed set (request metadata), and a server
// that learns of a failure serves the keys it backs up for it
// (server/parameter_server.h).
// Calls to a failed server go to the next live server of its chain.
//
// A push that the failed server acknowledged may not have reached its
// backup (a sync step not complete there yet; an async push forwarded but
// not yet acknowledged): each server's acknowledged pushes of the latest
// `keep_steps` steps are kept as copies and pushed again to the backup,
// which takes them as duplicates where its state includes them already.
// Sync needs 1; async and ssp keep 4 (a backup further behind than that
// loses the pushes in between).
//
// Thread-safe.
#ifndef SHARDPS_CLIENT_FAILOVER_H_
#define SHARDPS_CLIENT_FAILOVER_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/server_connection.h"
#include "common/replica_map.h"

namespace shardps {

class Failover {
 public:
  Failover(ReplicaMap map, absl::Duration timeout, int keep_steps)
      : map_(map), timeout_(timeout), keep_steps_(keep_steps) {}

  // The connections, in server-id order; before any call.
  void Attach(std::vector<ServerConnection*> connections) { connections_ = std::move(connections); }
  // From the first registration on: before it, a refused connection is a
  // server still starting, not a failed one.
  void Arm() { armed_ = true; }
  bool armed() const { return armed_; }

  const ReplicaMap& map() const { return map_; }
  absl::Duration timeout() const { return timeout_; }
  ServerSet failed() const { return ServerSet{failed_bits_.load()}; }
  // The connection serving `server`'s keys now; null when every copy failed.
  ServerConnection* Serving(int server) const;
  // Adds `servers` to the failed set (`why` for the log); pushes the kept
  // pushes of each newly failed one again, to the server now serving it.
  void MarkFailed(ServerSet servers, absl::string_view why);
  // A push of `step` that `server` acknowledged: kept until the pushes of
  // `keep_steps` later steps to it are.
  void Retain(int server, int64_t step, const CallSpec& spec, const ServerConnection::Attempt& attempt);

 private:
  struct Kept {
    int server = 0;
    int64_t step = 0;
    CallSpec spec;
    ServerConnection::Attempt attempt;
  };
  const ReplicaMap map_;
  const absl::Duration timeout_;
  const int keep_steps_;
  std::vector<ServerConnection*> connections_;
  std::atomic<bool> armed_{false};
  std::atomic<uint64_t> failed_bits_{0};
  absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_FAILOVER_H_
