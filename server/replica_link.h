// Replication (DESIGN.md, "Replication"): how a primary's updates reach the
// next copy of its keys. The core (server/parameter_server.h) is
// transport-free: it hands each sync step's updated keys to a ReplicaLink,
// which the host implements over gRPC (server/grpc_replica_link.h) and
// tests may implement in-process.
#ifndef SHARDPS_SERVER_REPLICA_LINK_H_
#define SHARDPS_SERVER_REPLICA_LINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/key_partition.h"
#include "server/sparse/rows_replica.h"

namespace shardps {

// One key as its primary left it after an update: the backup installs it
// whole (weights and optimizer slots), so it continues exactly.
struct ReplicaUpdate {
  ChunkKey key;
  int64_t version = 0;
  // The primary's buffer, never written while referenced (server/key_state.h).
  std::shared_ptr<const std::vector<float>> weights;
  std::vector<std::vector<float>> slots;
  // Per worker rank, the last step whose push the state includes (a push
  // of that step or earlier, sent again after a failover, is a duplicate).
  std::vector<int64_t> last_pushed_step;

  // Bytes of values it carries: weights and every slot.
  int64_t Bytes() const {
    return static_cast<int64_t>(weights->size()) * 4 * (1 + static_cast<int64_t>(slots.size()));
  }
};

class ReplicaLink {
 public:
  virtual ~ReplicaLink() = default;
  // Every server's address, in server-id order (learned from a worker's
  // registration); a link may ignore it.
  virtual void SetPeers(const std::vector<std::string>& addresses) = 0;
  // Sends `updates` of the sender's `timeline` from server `from` to server
  // `to`, in order after the earlier sends to `to`; calls `done` once, on
  // any thread: OK when `to` has installed them; FAILED_PRECONDITION when
  // `to` has taken the sender's keys over (the sender must step down);
  // ABORTED when `to` is on a later timeline (the updates belong to the one
  // it left); UNAVAILABLE when `to` did not take them within the failover
  // timeout (it is taken for failed). A peer that answers OUT_OF_RANGE (it
  // is rewinding, or has not rewound to `timeline` yet) is tried again, its
  // answer not counted as silence, until it takes them.
  virtual void Send(int from, int to, int64_t timeline, std::vector<ReplicaUpdate> updates,
                    std::function<void(absl::Status)> done) = 0;
  // The same for rows of sparse tables, in order with the keys sent to `to`.
  virtual void SendRows(int from, int to, int64_t timeline, std::vector<RowsReplica> rows,
                        std::function<void(absl::Status)> done) = 0;
  // Updates not sent because a newer one of the same key went in the same
  // call (a link that fell behind sends each key once a call).
  virtual int64_t UpdatesSuperseded() const { return 0; }
  // Server `to` came back (it joins the job): connect to it afresh rather
  // than wait out a connection backoff from when it was down.
  virtual void Renew(int to) { (void)to; }
  // Server `to` joined at a new address (a spare in a failed server's
  // place, common/moved_servers.h): calls to it go to `address` from the
  // next one on.
  virtual void Readdress(int to, const std::string& address) {
    (void)to;
    (void)address;
  }
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_REPLICA_LINK_H_
