// ps_server --join=ADDRESSES: this server joins a running replicated job
// (a restarted server, or a spare in a failed one's place) while the job
// runs (DESIGN.md, "Replication": re-replication).
//
// A thread that:
//  1. asks the peers (Join RPC, server/ps_service.cc) until one runs the job,
//     and takes its layout, timeline and view of the job's servers. Should
//     the job's workers initialise this server first, the job is new and
//     there is nothing to join: the thread ends.
//  2. joins (ParameterServer::BeginJoin) and tells every peer, whose view
//     then shows it joining: each copies it the keys it serves that this
//     server holds, and forwards their updates from then on.
//  3. once the core has every key (it marks itself live), tells every peer
//     again; workers learn it from the peers' answers and register.
// Every wait logs what it waits for.
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
#include "proto/shardps.grpc.pb.h"
#include "server/parameter_server.h"

namespace shardps {

struct ReplicaJoinerOptions {
  std::vector<std::string> peers;  // every server's address, in id order (this one's included)
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string auth_token;
  absl::Duration poll = absl::Milliseconds(200);   // between rounds of asking
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
  std::vector<std::unique_ptr<wire::ParameterService::Stub>> stubs_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_REPLICA_JOINER_H_
