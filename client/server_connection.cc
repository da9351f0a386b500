#include "client/server_connection.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/failover.h"
#include "common/grpc_status.h"
#include "common/rpc_metadata.h"
#include "spdlog/spdlog.h"

namespace shardps {

namespace {
constexpr int kMaxReregistrations = 8;
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(250);
}  // namespace

ServerConnection::ServerConnection(int server_id, const ClientOptions& options,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials, Clock* clock,
                                   DelayedExecutor* executor)
    : server_id_(server_id), options_(options), clock_(clock), executor_(executor),
      credentials_(std::move(credentials)) {
  {
    absl::MutexLock lock(&stubs_mu_);
    address_ = options_.servers[server_id];
    stubs_ = MakeStubs(address_, connect_timeout_);
  }
  absl::MutexLock lock(&mu_);
  last_call_ = last_answer_ = clock_->Now();
}

ServerConnection::~ServerConnection() { absl::MutexLock lock(&mu_); }

absl::Status ServerConnection::Annotate(const absl::Status& status, int attempts) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("server ", server_id_, " at ", address(),
                                   attempts > 1 ? absl::StrCat(" (after ", attempts, " attempts)") : "", ": ",
                                   status.message()));
}

void ServerConnection::Call(const CallSpec& spec, Attempt attempt, std::function<void(absl::Status)> done) {
  auto call = std::make_shared<CallState>();
  call->spec = spec;
  call->attempt = std::move(attempt);
  call->done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    if (calls_in_flight_++ == 0) last_answer_ = clock_->Now();
  }
  StartAttempt(std::move(call));
}

std::shared_ptr<grpc::ClientContext> ServerConnection::NewContext(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return nullptr;
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));  // gRPC's deadlines are real time
  if (!options_.auth_token.empty()) ctx->AddMetadata(kAuthorizationKey, kBearerPrefix + options_.auth_token);
  if (failover_ != nullptr) {
    if (const ServerView view = failover_->view(); !view.Pristine()) ctx->AddMetadata(kServerViewKey, view.Text());
    if (std::string moved = failover_->MovedText(); !moved.empty()) ctx->AddMetadata(kServerMovedKey, moved);
  }
  if (checkpoint_relay_ != nullptr) {
    if (const std::optional<CheckpointStep> newest = checkpoint_relay_->Newest()) {
      ctx->AddMetadata(kCheckpointStepKey, CheckpointStepText(*newest));
    }
  }
  contexts_.insert(ctx.get());
  last_call_ = clock_->Now();
  return ctx;
}

void ServerConnection::ReleaseContext(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  contexts_.erase(ctx);
  last_answer_ = clock_->Now();
}

void ServerConnection::StartAttempt(std::shared_ptr<CallState> call) {
  if (Redirect(call)) return;
  bool stale = false;
  {
    absl::MutexLock lock(&mu_);
    stale = call->spec.fails_over && SessionStale();
    if (!stale) {
      if (reviving_ && call->spec.fails_over) {
        held_for_revival_.push_back(std::move(call));
        return;
      }
      if (call->attempts == 0) call->first_session = session_;
      call->session = session_;
    }
  }
  if (stale) {
    // Begins the revival (once per standing: SessionStale), which holds this
    // call until it has registered; if none could begin (stopping), the
    // call goes on and fails as the connection stops.
    Revive();
    return StartAttempt(std::move(call));
  }
  // A sync or ssp call belongs to the session (and timeline) it was issued
  // in: when this worker registered again while it waited to be retried
  // (the job rewound, say), replaying it would name a step the job has left.
  if (call->attempts > 0 && call->spec.on_abort == OnAbort::kRejoin && call->session != call->first_session) {
    return Finish(call, RejoinError(Annotate(absl::AbortedError(absl::StrCat(
                                                 "the ", call->spec.what, " was issued before this worker registered "
                                                 "again; the job has moved on")))
                                        .message()));
  }
  std::shared_ptr<grpc::ClientContext> ctx = NewContext(call->spec.timeout);
  if (ctx == nullptr) {
    return Finish(call, Annotate(absl::CancelledError(absl::StrCat(call->spec.what, " cancelled: the client is shutting down"))));
  }
  ++call->attempts;
  call->attempt_generation = Generation();
  grpc::ClientContext* const raw = ctx.get();
  const std::shared_ptr<Stub> stub = StubFor(call->spec.lane);
  call->attempt(*stub, raw, call->session, [this, call, ctx = std::move(ctx)](grpc::Status status) mutable {
    ReleaseContext(ctx.get());
    NoteIncarnation(*ctx);
    NoteServerView(*ctx);
    NoteCheckpointStep(*ctx);
    // The context (and the channel it holds) goes before the call can
    // finish: once the last call has finished, Shutdown() returns and the
    // owner may tear gRPC down, so nothing of it may outlive Finish().
    ctx.reset();
    OnAttemptDone(call, FromGrpcStatus(status));
  });
}

void ServerConnection::OnAttemptDone(std::shared_ptr<CallState> call, absl::Status status) {
  if (status.ok()) return Finish(call, status);
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) return RetryLater(call, status);
  // CANCELLED that this client did not ask for: the server cancelled the
  // call as it shut down (a restart), so it is retried like UNAVAILABLE.
  if (absl::IsCancelled(status) && !Stopped()) return RetryLater(call, status);
  if (absl::IsAborted(status)) return OnAborted(call, status);
  Finish(call, Annotate(status, call->attempts));
}

void ServerConnection::RetryLater(std::shared_ptr<CallState> call, const absl::Status& status) {
  const absl::Time now = clock_->Now();
  // Replication: a failure clock times one standing of the server. When
  // its standing changed (it failed, or came back and joins), the clock
  // starts again, and a failure of an attempt begun before the change says
  // nothing about the server now.
  const uint32_t generation = Generation();
  if (call->first_failure == absl::InfiniteFuture() || call->failure_generation != generation) {
    call->first_failure = now;
    call->failure_generation = generation;
  }
  const absl::Duration waited = now - call->first_failure;
  // A refused, reset or closed connection (kill -9), or silence past the
  // failover timeout (a connection not set up in time among it), and the
  // backup serves this server's keys.
  if (failover_ != nullptr && failover_->armed() && call->spec.fails_over && call->attempt_generation == generation &&
      (PeerProcessGone(status) || waited >= failover_->timeout())) {
    TakeForFailed(absl::StrCat("a ", call->spec.what, ": ", status.message()), generation);
    if (Redirect(call)) return;
  }
  if (waited >= options_.server_timeout) {
    // The last failure's code (UNAVAILABLE or DEADLINE_EXCEEDED) stands.
    return Finish(call, Annotate(absl::Status(status.code(), absl::StrCat(
                                     "no answer for ", absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(100))), " (server timeout ",
                                     absl::FormatDuration(options_.server_timeout), "); giving up the ",
                                     call->spec.what, ": ", status.message())),
                                 call->attempts));
  }
  {
    absl::MutexLock lock(&mu_);
    if (now - last_wait_log_ >= options_.wait_log_interval) {
      last_wait_log_ = now;
      spdlog::warn("waiting for server {} at {}: a {} has failed for {:.1f} s ({}); retrying for up to {}",
                   server_id_, address(), call->spec.what, absl::ToDoubleSeconds(waited),
                   std::string(status.message()), absl::FormatDuration(options_.server_timeout));
    }
  }
  if (absl::IsUnavailable(status)) NoteFailedConnect(status, call->first_failure, now);
  const absl::Duration backoff =
      std::min(options_.initial_backoff * (1 << std::min(call->attempts - 1, 10)), kMaxBackoff);
  retries_.fetch_add(1);
  executor_->RunAfter(backoff, [this, call] { StartAttempt(call); });
}

void ServerConnection::OnAborted(std::shared_ptr<CallState> call, const absl::Status& status) {
  if (call->spec.on_abort == OnAbort::kRejoin) return Finish(call, RejoinError(Annotate(status).message()));
  if (call->spec.on_abort == OnAbort::kFail || ++call->reregistrations > kMaxReregistrations) {
    return Finish(call, Annotate(status, call->attempts));
  }
  Reregister(call->session, [this, call, status](absl::Status registered) {
    if (!registered.ok()) return Finish(call, registered);
    spdlog::info("server {}: registered again after \"{}\"; retrying the {}", server_id_,
                 std::string(status.message()), call->spec.what);
    StartAttempt(call);
  });
}

void ServerConnection::Reregister(uint64_t observed, std::function<void(absl::Status)> done) {
  bool start = false;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == observed) {
      reregister_waiters_.push_back(std::move(done));
      start = !reregistering_;
      reregistering_ = true;
      done = nullptr;
    }
  }
  if (done) return done(absl::OkStatus());  // someone registered since that attempt
  if (!start) return;                       // a registration under way will call back
  Register(std::nullopt, [this](absl::StatusOr<wire::RegisterResponse> r) {
    std::vector<std::function<void(absl::Status)>> waiters;
    {
      absl::MutexLock lock(&mu_);
      reregistering_ = false;
      waiters.swap(reregister_waiters_);
    }
    for (auto& w : waiters) w(r.status());
  });
}

void ServerConnection::Register(std::optional<ResumeAt> resume, RegisterDone done) {
  auto req = std::make_shared<wire::RegisterRequest>();
  req->set_rank(options_.rank);
  *req->mutable_view() = JobViewToProto(options_.job);
  // For replication: where each server is (one that joined anew, at its new address).
  for (const std::string& address : failover_ != nullptr ? failover_->Addresses(options_.servers) : options_.servers) {
    req->add_servers(address);
  }
  if (resume) {
    req->set_resume_step(resume->step);
    req->set_timeline(resume->timeline);
  }
  auto resp = std::make_shared<wire::RegisterResponse>();
  Call(
      CallSpec{"registration", options_.push_timeout, OnAbort::kFail},
      [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t, std::function<void(grpc::Status)> cb) {
        resp->Clear();
        stub.proto->async()->Register(ctx, req.get(), resp.get(), std::move(cb));
      },
      [this, resp, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        {
          absl::MutexLock lock(&mu_);
          session_ = resp->session_id();
          session_generation_ = Generation();  // the server's answer brought its standing
        }
        registrations_.fetch_add(1);
        done(*resp);
      });
}

void ServerConnection::Finish(const std::shared_ptr<CallState>& call, const absl::Status& status) {
  call->done(status);
  call->done = nullptr;  // releases what the callback holds
  absl::MutexLock lock(&mu_);
  --calls_in_flight_;
}

void ServerConnection::NoteCheckpointStep(const grpc::ClientContext& ctx) {
  if (checkpoint_relay_ == nullptr) return;
  const auto& metadata = ctx.GetServerTrailingMetadata();
  auto it = metadata.find(kCheckpointStepKey);
  if (it == metadata.end()) return;
  if (auto heard = ParseCheckpointStep(absl::string_view(it->second.data(), it->second.size()))) {
    checkpoint_relay_->Note(*heard);
  }
}

void ServerConnection::NoteIncarnation(const grpc::ClientContext& ctx) {
  const auto& metadata = ctx.GetServerTrailingMetadata();
  auto it = metadata.find(kIncarnationKey);
  if (it == metadata.end()) return;
  const std::optional<uint64_t> now = ParseIncarnation(absl::string_view(it->second.data(), it->second.size()));
  if (!now) return;
  const uint64_t before = incarnation_.exchange(*now);
  if (before != 0 && before != *now) {
    spdlog::warn("server {} at {} restarted (incarnation {:016x}, was {:016x}); registering again", server_id_,
                 address(), *now, before);
  }
}

void ServerConnection::Tend() {
  CloseIdleRetired();
  // A failed or joining server: the server serving its keys has the
  // session's work. A heartbeat now and then still brings its view: it may
  // be live again, which a worker that hears from no other server (the
  // other copy failed too) would not learn otherwise.
  if (failover_ != nullptr && !failover_->view().Live(server_id_)) {
    bool due = false;
    {
      absl::MutexLock lock(&mu_);
      due = !stopped_ && clock_->Now() - last_call_ >= options_.heartbeat_interval;
    }
    if (due) SendHeartbeat();
    return;
  }
  if (ProbeForFailover()) return;
  const absl::Time now = clock_->Now();
  bool heartbeat = false;
  {
    absl::MutexLock lock(&mu_);
    heartbeat = session_ != 0 && !stopped_ && now - last_call_ >= options_.heartbeat_interval;
    if (calls_in_flight_ > 0 && now - last_answer_ >= options_.wait_log_interval &&
        now - last_wait_log_ >= options_.wait_log_interval) {
      last_wait_log_ = now;
      spdlog::warn("waiting for server {} at {}: {} calls in flight, no answer for {:.1f} s", server_id_,
                   address(), calls_in_flight_, absl::ToDoubleSeconds(now - last_answer_));
    }
  }
  if (heartbeat) SendHeartbeat();
}

void ServerConnection::CancelInFlight() {
  absl::MutexLock lock(&mu_);
  for (grpc::ClientContext* ctx : contexts_) ctx->TryCancel();
}

void ServerConnection::SendHeartbeat() {
  // A busy server may answer late; what matters is that it hears the call.
  std::shared_ptr<grpc::ClientContext> ctx = NewContext(std::max(options_.heartbeat_interval, absl::Seconds(10)));
  if (ctx == nullptr) return;
  auto req = std::make_shared<wire::HeartbeatRequest>();
  auto resp = std::make_shared<wire::HeartbeatResponse>();
  {
    absl::MutexLock lock(&mu_);
    req->set_session_id(session_);
    ++calls_in_flight_;
  }
  grpc::ClientContext* const raw = ctx.get();
  StubFor(Lane::kOthers)->proto->async()->Heartbeat(raw, req.get(), resp.get(), [this, req, resp, ctx = std::move(ctx)](grpc::Status s) mutable {
    ReleaseContext(ctx.get());
    NoteIncarnation(*ctx);
    NoteServerView(*ctx);
    NoteCheckpointStep(*ctx);
    ctx.reset();  // as an attempt's (StartAttempt)
    if (!s.ok()) spdlog::debug("heartbeat to server {}: {}", server_id_, s.error_message());
    absl::MutexLock lock(&mu_);
    --calls_in_flight_;
  });
}

bool ServerConnection::Stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

uint64_t ServerConnection::session() const {
  absl::MutexLock lock(&mu_);
  return session_;
}

void ServerConnection::StopAndCancel() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  for (grpc::ClientContext* ctx : contexts_) ctx->TryCancel();
}

void ServerConnection::AwaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &calls_in_flight_));
}

}  // namespace shardps
