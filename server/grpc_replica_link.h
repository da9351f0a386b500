// ReplicaLink over gRPC (server/replica_link.h): a primary's updates go to
// the next copy as raw-framed Replicate calls (proto/shardps.proto: the
// weights and slots are not copied into the message), one sender thread
// per destination, in order; what queues up while a call is out goes in the
// next call. A destination that refuses or resets the connection (a dead
// process) is reported UNAVAILABLE at once; one that does not answer
// (deadlines: each attempt failover_timeout plus time for its bytes) is
// retried for failover_timeout first (twice that in one case:
// SilenceBeforeFailed). One that answers OUT_OF_RANGE (rewinding, or not
// on the updates' timeline yet) is not silent: retried until it takes them.
#ifndef SHARDPS_SERVER_GRPC_REPLICA_LINK_H_
#define SHARDPS_SERVER_GRPC_REPLICA_LINK_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/reconnect_args.h"
#include "common/rpc_metadata.h"
#include "common/security.h"
#include "proto/shardps.grpc.pb.h"
#include "server/replica_link.h"

namespace shardps {

// How long server `from` of a job of `servers` retries a silent copy on
// server `to` before reporting it failed: `failover_timeout`, or twice that
// in a job of 2 servers when `to` < `from`. There each backs up the other,
// and two servers that cannot reach each other while both live would name
// each other failed at the same moment: every copy would step down. The
// lower id names the other failed first; the other learns it from the
// workers' calls and steps down, and the job goes on with one copy of every
// key. Not in larger jobs, where with --replicas=2 no two servers back up
// each other (server k forwards to k+1 only, also after a failure; with
// --replicas=3 in a job of three, two do once the third has failed: not
// covered). There a server that learns of a paused peer from the workers,
// not by itself, found it 0.6 s later (bench/failover --server=0).
absl::Duration SilenceBeforeFailed(absl::Duration failover_timeout, int from, int to, int servers);

struct ReplicaLinkOptions {
  absl::Duration failover_timeout = absl::Seconds(3);
  absl::Duration attempt_timeout = absl::Seconds(10);  // of one call (a large update takes a while)
  // Of one attempt to set up a connection (--peer_connect_timeout).
  absl::Duration connect_timeout = kConnectTimeout;
  TlsFiles tls;            // as the server's own: TLS to peers with `ca`
  std::string auth_token;  // the job token, sent to peers
  int64_t max_message_bytes = 256 << 20;
};

class GrpcReplicaLink final : public ReplicaLink {
 public:
  // FAILED_PRECONDITION or INVALID_ARGUMENT for unusable TLS files.
  static absl::StatusOr<std::unique_ptr<GrpcReplicaLink>> Create(const ReplicaLinkOptions& options);
  // Fails what is still queued (UNAVAILABLE) and joins the sender threads.
  ~GrpcReplicaLink() override;

  void SetPeers(const std::vector<std::string>& addresses) override;
  void Send(int from, int to, int64_t timeline, std::vector<ReplicaUpdate> updates,
            std::function<void(absl::Status)> done) override;
  void SendRows(int from, int to, int64_t timeline, std::vector<RowsReplica> rows,
                std::function<void(absl::Status)> done) override;
  void Renew(int to) override;
  void Readdress(int to, const std::string& address) override;
  int64_t UpdatesSuperseded() const override { return superseded_.load(); }
  // The server's view of the job's servers (server/view_metadata.h): `ours`
  // gives the metadata of every call, `theirs` takes a peer's answer's
  // trailing metadata. Before the first Send.
  void SetViewExchange(std::function<MetadataPairs()> ours, std::function<void(const ReceivedMetadata&)> theirs) {
    view_ours_ = std::move(ours);
    view_theirs_ = std::move(theirs);
  }

 // What Send queued (public for the frame encoder in the .cc).
  struct Item {
    int from = 0;
    int64_t timeline = 0;  // the sender's when queued: a call carries one
    std::vector<ReplicaUpdate> updates;
    std::function<void(absl::Status)> done;
    std::vector<RowsReplica> rows;
  };

 private:
  struct Peer {
    std::deque<Item> queue;
    std::unique_ptr<grpc::GenericStub> stub;
    std::thread sender;
    bool renew = false;  // make a new channel before the next call
  };
  GrpcReplicaLink(const ReplicaLinkOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials)
      : options_(options), credentials_(std::move(credentials)) {}
  void Run(int to);
  void Queue(int to, Item item);
  // Where server `to` listens (moved_, else addresses_); "" when not known yet.
  std::string AddressOf(int to) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One call with every item taken (their slots move into it); retried as
  // the class comment says, a silent peer for `silence` (SilenceBeforeFailed).
  absl::Status Deliver(Peer& peer, int to, std::vector<Item>& items, absl::Duration silence);
  bool Stopping();

  const ReplicaLinkOptions options_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::function<MetadataPairs()> view_ours_;
  std::function<void(const ReceivedMetadata&)> view_theirs_;
  absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> moved_ ABSL_GUARDED_BY(mu_);  // Readdress: where a server joined anew
  std::map<int, std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> superseded_{0};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_GRPC_REPLICA_LINK_H_
