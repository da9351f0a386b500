// Re-replication (DESIGN.md, "Replication"): a server of a replicated job
// joins it again while it runs. A thread, in every ps_server with
// --replicas > 1:
//  - with --join=ADDRESSES (a restarted server, or a spare in a failed
//    one's place), first: asks the peers (Join RPC, server/ps_service.cc)
//    until one runs the job, takes its layout, timeline and view of the
//    job's servers and joins (ParameterServer::BeginJoin). Should the job's
//    workers initialise this server first, the job is new: nothing to join.
//  - then, whenever this server has stepped down (it was named failed while
//    it lived: paused past the failover timeout, say), it joins again
//    (ParameterServer::Rejoin), at the addresses the workers registered.
// Joining, it tells every peer, whose view then shows it joining: each
// copies it the keys it serves that this server holds, and forwards their
// updates from then on. Once the core has every key (it marks itself live),
// it tells every peer again; workers learn it from the peers' answers and
// register. Every wait logs what it waits for.
#ifndef SHARDPS_SERVER_REPLICA_JOINER_H_
#define SHARDPS_SERVER_REPLICA_JOINER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/reconnect_args.h"
#include "proto/shardps.grpc.pb.h"
#include "server/parameter_server.h"

namespace shardps {

// Before a server with --join starts: whether any other server of the job
// (`peers`, in id order; `self` is skipped) runs the job, having trained:
// then this server joins it; else it starts as a server of a new or
// restarting job would (restoring its checkpoint). Asks each once, waiting
// at most `wait` for each answer.
bool AnyPeerRunsJob(const std::vector<std::string>& peers, int self,
                    const std::shared_ptr<grpc::ChannelCredentials>& credentials, const std::string& auth_token,
                    absl::Duration wait);

struct ReplicaJoinerOptions {
  // --join: every server's address, in id order (this one's included).
  // Empty: the addresses the workers registered are used.
  std::vector<std::string> peers;
  bool join_at_start = false;  // ask the peers for the job and join it first
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string auth_token;
  absl::Duration poll = absl::Milliseconds(200);   // between rounds of asking
  absl::Duration connect_timeout = kConnectTimeout;  // --peer_connect_timeout
  absl::Duration log_every = absl::Seconds(5);     // of a wait
};

class ReplicaJoiner {
 public:
  // Starts the thread. `core` must outlive the joiner.
  ReplicaJoiner(ParameterServer* core, ReplicaJoinerOptions options);
  ~ReplicaJoiner();  // stops the thread
  ReplicaJoiner(const ReplicaJoiner&) = delete;
  ReplicaJoiner& operator=(const ReplicaJoiner&) = delete;

 private:
  void Run();
  // --join at start; false when there was nothing to join.
  bool JoinAtStart();
  // Joined (BeginJoin or Rejoin): tells the peers, waits until live, tells
  // them again. False when stopped, or taken for failed meanwhile.
  bool Announce();
  // The stubs, made once the addresses are known (false: not yet), and
  // again when a server joined at a new address.
  bool HaveStubs();
  // Asks peer `s`; nullopt when it did not answer. The request carries this
  // server's view; the answer's is merged into `theirs`, or into this
  // server's own when null.
  std::optional<wire::JoinResponse> Ask(int s, ServerView* theirs = nullptr);
  // Phase 1, with the peers' view; false when stopped or initialised by
  // workers.
  bool FindJob(wire::JoinResponse* job, ServerView* view);
  // Tells every peer not failed this server's view, until each has answered.
  void TellPeers(const char* what);
  bool Stopping(absl::Duration wait) { return stop_.WaitForNotificationWithTimeout(wait); }

  ParameterServer* const core_;
  const ReplicaJoinerOptions options_;
  std::vector<std::string> peers_;
  std::vector<std::unique_ptr<wire::ParameterService::Stub>> stubs_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_REPLICA_JOINER_H_
