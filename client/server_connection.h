// One server as a worker sees it: its channels, the worker's session with
// it, and the policy every call to it follows (DESIGN.md, "Failures"):
//  - UNAVAILABLE or DEADLINE_EXCEEDED (the server is down, restarting,
//    paused or cut off): retried with backoff (doubling from
//    initial_backoff up to 250 ms) until it has not answered for
//    server_timeout; then the call fails UNAVAILABLE naming the server.
//    Meanwhile the worker logs every wait_log_interval which server it is
//    waiting for.
//  - ABORTED (session unknown or expired, the job rewound): as the call's
//    OnAbort says. A sync or ssp push or pull fails with a rejoin status
//    (ps_client.h) so that the trainer lines up with the job; async ones
//    and Init register again and are retried. One registration runs at a
//    time, shared by every call that needs it, and no thread blocks on it.
//  - anything else fails at once, prefixed with the server's id and address.
//  - a sync or ssp call that is to be retried after this worker registered
//    again (a rewind, say) fails with a rejoin status instead: it was issued
//    in a session, and for a step, that the job has left.
//
// Thread-safe. StopAndCancel() then AwaitIdle() before destruction.
#ifndef SHARDPS_CLIENT_SERVER_CONNECTION_H_
#define SHARDPS_CLIENT_SERVER_CONNECTION_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/reconnect_args.h"
#include "proto/shardps.grpc.pb.h"
#include "client/delayed_executor.h"
#include "client/checkpoint_relay.h"
#include "client/ps_client.h"

namespace shardps {

// One channel's stubs: the generated one, and the generic one for the raw
// framing of Push and Pull (common/tensor_frame.h).
struct Stub {
  std::unique_ptr<wire::ParameterService::Stub> proto;
  std::unique_ptr<grpc::GenericStub> raw;
  int server_id = 0;  // the server its channel reaches
  // The channel both stubs use, and how many references to it the stub
  // itself holds: more means a call in flight holds it (its ClientContext).
  std::shared_ptr<grpc::Channel> channel;
  long own_channel_refs = 0;
};

// What a call does when the server answers ABORTED.
enum class OnAbort {
  kRejoin,         // fail with a rejoin status (sync and ssp pushes and pulls)
  kRegisterAgain,  // register again and retry (async pushes and pulls, Init)
  kFail,           // fail (registrations and rewinds, which carry no session)
};

// Which of the server's channels (TCP connections) a call takes. With two
// or more, pushes have the first to themselves and every other call shares
// the rest, so that no pull request waits in a connection behind push bytes
// and no push's acknowledgement waits behind weights on their way back
// (README, "Scaling": async at N = 8 0.81-0.82 -> 0.84-0.85, and 0.87 ->
// 0.90 with pull_with_push). With one, all share it. Fetches and the other
// calls take turns over the shared channels each in their own rotation, so
// that the weights spread over all of them whatever else is called between
// two fetches (a sync pull is an await then a fetch: in one rotation every
// fetch took the same channel and the awaits the other).
// With ClientOptions::first_weights_lane one more channel, the last, carries
// the awaits and the fetches of the weights the next forward pass needs
// first, and nothing else: the server lifts it out of the bulk band
// (PullRequest.first_weights), so those answers overtake the other weights
// on the server's uplink (docs/performance.md, "The first-weights lane").
enum class Lane {
  kPushes,        // bulk bytes to the server
  kFetches,       // bulk bytes back: pulls that carry weights or rows
  kOthers,        // awaits, registrations, heartbeats, ...
  kFirstWeights,  // with first_weights_lane: awaits, and fetches of the first weights
};

struct CallSpec {
  const char* what = "call";  // names the call in messages: "push", "pull", ...
  absl::Duration timeout;     // of each attempt
  OnAbort on_abort = OnAbort::kFail;
  Lane lane = Lane::kOthers;
  // With replication (client/failover.h): the call goes to the server now
  // serving this server's keys when this one has failed (pushes and pulls).
  bool fails_over = false;
  // With fails_over: whose keys the call names, once it has been handed to
  // another server (-1: the connection's own server).
  int keys_of = -1;
};

class Failover;

// Where a registration continues: at `step` of `timeline` (see
// proto/shardps.proto, RegisterRequest).
struct ResumeAt {
  int64_t step = 0;
  int64_t timeline = 0;
};

class ServerConnection {
 public:
  // Starts one attempt: the RPC on `stub` with `ctx` (its deadline set) and
  // the current `session`; calls `done` once with gRPC's status.
  using Attempt = std::function<void(Stub& stub, grpc::ClientContext* ctx, uint64_t session,
                                     std::function<void(grpc::Status)> done)>;
  using RegisterDone = std::function<void(absl::StatusOr<wire::RegisterResponse>)>;

  // `clock` and `executor` must outlive the connection; `credentials`
  // secure (or not) its channels.
  ServerConnection(int server_id, const ClientOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials,
                   Clock* clock, DelayedExecutor* executor);
  // Waits out a Finish() still releasing the lock after AwaitIdle() woke.
  ~ServerConnection();
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  // Runs the call as the class comment says; `done` runs exactly once.
  void Call(const CallSpec& spec, Attempt attempt, std::function<void(absl::Status)> done);
  // Replication: `failover` (outliving this connection) decides when this
  // server has failed and where its calls go then. Before any call.
  void SetFailover(Failover* failover) { failover_ = failover; }
  // Checkpoints by time (client/checkpoint_relay.h): the newest step a
  // server announced, shared by the worker's connections and outliving this
  // one; raised from every answer, sent on every call. Before any call.
  void SetCheckpointRelay(CheckpointRelay* relay) { checkpoint_relay_ = relay; }
  // A heartbeat that carries the failed set (sent to a server once it is
  // taken for failed: a paused one reads it when it resumes, and steps down).
  void TellFailed() { SendHeartbeat(); }
  // Cancels the attempts in flight: their calls retry, and go to the backup
  // once this server is in the failed set.
  void CancelInFlight();
  // Replication: the server joined the job at `address` (a spare in a failed
  // server's place, common/moved_servers.h): calls go there from the next
  // attempt on. Nothing changes when it is where the connection points now.
  void Repoint(const std::string& address);
  // New channels to where the connection points: a server live again is
  // connected to afresh. A channel that failed to connect while the server
  // was down fails calls at once until its reconnection backoff ends, and a
  // refused connection is taken for a dead process (client/failover.h).
  void Renew();
  // Where the connection points: the job's address, or the one it moved to.
  std::string address() const;
  // Registers (continuing at `resume` when given) and keeps the session.
  void Register(std::optional<ResumeAt> resume, RegisterDone done);
  // Replication: the server is live again after joining the job (a new
  // process, which knows no session of this worker): registers with it,
  // holding back the pushes and pulls for it until that is done (they would
  // be refused, and its connection may still be waiting out a reconnection
  // backoff from when it was down, which is not a failure).
  void Revive();

  // For the heartbeat thread: a heartbeat when idle for heartbeat_interval,
  // and a log line when calls have waited wait_log_interval for an answer.
  void Tend();
  // Closes the retired channels (replaced by Repoint(), Renew() or a longer
  // connect timeout) that no call holds any more. Tend() does it: on the
  // heartbeat thread, never on a gRPC callback thread.
  void CloseIdleRetired();
  // Retired stubs still open (tests).
  size_t retired_stubs() const;
  // Later calls fail CANCELLED; attempts in flight are cancelled.
  void StopAndCancel();
  bool Stopped() const;  // StopAndCancel has run
  uint64_t session() const;  // the current session (0 before the first registration)
  // Blocks until every call's `done` has run; by then each attempt has let
  // go of its gRPC context (and the channel that holds).
  void AwaitIdle();

  // `status` prefixed with this server's id and address.
  absl::Status Annotate(const absl::Status& status, int attempts = 1) const;
  int64_t retries() const { return retries_; }
  int64_t registrations() const { return registrations_; }

 private:
  // One logical call across its attempts.
  struct CallState {
    CallSpec spec;
    Attempt attempt;
    std::function<void(absl::Status)> done;
    int attempts = 0;
    int reregistrations = 0;
    uint64_t session = 0;                              // of the last attempt
    uint64_t first_session = 0;                        // of the first attempt
    absl::Time first_failure = absl::InfiniteFuture();  // of the server not answering
    // Replication: the server's generation in this worker's view when the
    // last attempt started, and when first_failure was set.
    uint32_t attempt_generation = 0;
    uint32_t failure_generation = 0;
  };
  void StartAttempt(std::shared_ptr<CallState> call);
  void OnAttemptDone(std::shared_ptr<CallState> call, absl::Status status);
  void RetryLater(std::shared_ptr<CallState> call, const absl::Status& status);
  void OnAborted(std::shared_ptr<CallState> call, const absl::Status& status);
  // Registers again unless the session already changed from `observed`.
  void Reregister(uint64_t observed, std::function<void(absl::Status)> done);
  void Finish(const std::shared_ptr<CallState>& call, const absl::Status& status);
  void NoteIncarnation(const grpc::ClientContext& ctx);
  // Replication: merges the view of the job's servers an answer carries.
  void NoteServerView(const grpc::ClientContext& ctx);
  // Raises the relayed checkpoint step to the one an answer carries.
  void NoteCheckpointStep(const grpc::ClientContext& ctx);
  // Replication, from Tend(): while calls wait and the server has not
  // answered for a third of the failover timeout, a heartbeat probes it; a
  // server that answers nothing, probes included, for the whole timeout (a
  // paused one) is taken for failed and the waiting calls go to its backup.
  bool ProbeForFailover();
  // Marks this server failed (client/failover.h), saying `why`.
  // `seen_generation`: the server's, as the evidence was gathered
  // (Failover::MarkFailed).
  void TakeForFailed(const std::string& why, uint32_t seen_generation);
  // The server's generation in this worker's view (0 without replication).
  uint32_t Generation() const;
  // Replication: the server is live in the view under a later standing than
  // the one the session was granted under (it failed or restarted since, and
  // came back), and no revival has begun for that standing. Calls for its
  // keys must then wait for a registration there: the session may be
  // unknown to it. Failover::Merge revives a server as soon as its view
  // shows it live again, but a call routed to it in between (on another
  // thread) would carry the old session, and a sync worker would take the
  // server's "unknown session" for a rewind of the job.
  bool SessionStale() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands a call that fails over to the server serving this one's keys now,
  // when that is another (false: it stays here).
  bool Redirect(const std::shared_ptr<CallState>& call);
  void SendHeartbeat();
  // A context for one RPC, cancelled by StopAndCancel(); null once stopped.
  std::shared_ptr<grpc::ClientContext> NewContext(absl::Duration timeout);
  void ReleaseContext(grpc::ClientContext* ctx);
  // The lane's channel (round robin where it has several).
  std::shared_ptr<Stub> StubFor(Lane lane);
  // One stub per channel to `address`, whose connection attempts each get
  // `connect_timeout`.
  std::vector<std::shared_ptr<Stub>> MakeStubs(const std::string& address, absl::Duration connect_timeout) const;
  // Makes `fresh` the stubs calls use (with `connect_timeout`); the ones
  // they replace are retired.
  void ReplaceStubs(std::vector<std::shared_ptr<Stub>> fresh, absl::Duration connect_timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stubs_mu_);
  // Retires stubs that were made but lost a race to be installed.
  void Retire(std::vector<std::shared_ptr<Stub>> stubs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stubs_mu_);
  // A call failing since `first_failure` failed now with UNAVAILABLE
  // `status`. When gRPC says its connection attempts time out (not that
  // they are refused), and have since the call's first failure and for
  // kConnectAttemptsBeforeLonger of the current connect timeouts, new
  // channels with a longer one (common/reconnect_args.h).
  void NoteFailedConnect(const absl::Status& status, absl::Time first_failure, absl::Time now);

  // Constant after construction.
  const int server_id_;
  const ClientOptions options_;
  Clock* const clock_;
  DelayedExecutor* const executor_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  Failover* failover_ = nullptr;
  CheckpointRelay* checkpoint_relay_ = nullptr;

  // Replaced whole by Repoint(); an attempt holds its stub while it starts.
  mutable absl::Mutex stubs_mu_;
  std::vector<std::shared_ptr<Stub>> stubs_ ABSL_GUARDED_BY(stubs_mu_);
  std::string address_ ABSL_GUARDED_BY(stubs_mu_);
  absl::Duration connect_timeout_ ABSL_GUARDED_BY(stubs_mu_) = kConnectTimeout;
  absl::Time connect_timeout_since_ ABSL_GUARDED_BY(stubs_mu_) = absl::InfinitePast();  // when it was set
  // Stubs replaced by Repoint(), Renew() or a longer connect timeout, until
  // no call holds their channels (ReplaceStubs, CloseIdleRetired).
  std::vector<std::shared_ptr<Stub>> retired_ ABSL_GUARDED_BY(stubs_mu_);

  std::atomic<size_t> next_fetch_stub_{0}, next_other_stub_{0};
  std::atomic<uint64_t> incarnation_{0};
  std::atomic<int64_t> retries_{0}, registrations_{0};

  mutable absl::Mutex mu_;
  uint64_t session_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
  bool reregistering_ ABSL_GUARDED_BY(mu_) = false;
  bool reviving_ ABSL_GUARDED_BY(mu_) = false;  // Revive()'s registration is under way
  // Replication: the server's generation (client/failover.h) when session_
  // was granted, and when Revive() last began. A session granted under an
  // earlier standing of a server live now is stale (SessionStale).
  uint32_t session_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t revival_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<CallState>> held_for_revival_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(absl::Status)>> reregister_waiters_ ABSL_GUARDED_BY(mu_);
  absl::Time last_call_ ABSL_GUARDED_BY(mu_);       // an attempt started (heartbeats are for idle sessions)
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_);     // an attempt ended, or calls began while none was in flight
  absl::Time last_wait_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // ProbeForFailover's heartbeat
  absl::Time last_tend_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();   // ProbeForFailover's last run
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_SERVER_CONNECTION_H_
