// GrpcPsClient (client/grpc_ps_client.h): connecting, joining the job
// (registration, with a rewind when a server restarted), Init, heartbeats and
// shutdown. Pushes and pulls are in client/grpc_transfers.cc.
#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/key_partition.h"
#include "common/tcp_congestion.h"
#include "common/tensor_frame.h"
#include "common/trace.h"
#include "common/wire_dtype.h"
#include "spdlog/spdlog.h"
#include "client/delayed_executor.h"
#include "client/job_alignment.h"
#include "client/ps_client.h"
#include "client/ps_requests.h"
#include "client/server_connection.h"
#include "client/transfer_queue.h"
#include "client/grpc_ps_client.h"

namespace shardps {

namespace {
constexpr char kRejoinPayload[] = "type.shardps/rejoin";
}  // namespace

absl::Status RejoinError(absl::string_view why) {
  absl::Status status = absl::AbortedError(why);
  status.SetPayload(kRejoinPayload, absl::Cord("1"));
  return status;
}

bool IsRejoin(const absl::Status& status) { return status.GetPayload(kRejoinPayload).has_value(); }

void KeepFirstError(absl::Status& kept, const absl::Status& status) {
  if (!status.ok() && (kept.ok() || (IsRejoin(status) && !IsRejoin(kept)))) kept = status;
}

namespace {
std::vector<int64_t> TensorElements(const Layout& layout) {
  std::vector<int64_t> elements;
  for (const TensorSpec& t : layout.tensors) elements.push_back(t.NumElements());
  return elements;
}
}  // namespace

absl::Status Blocking(const std::function<void(PsClient::Done)>& fn) {
  absl::Notification finished;
  absl::Status result;
  fn([&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

absl::Status PsClient::Push(int64_t step, std::vector<TensorIn> tensors) {
  return Blocking([&](Done done) { PushAsync(step, std::move(tensors), std::move(done)); });
}

absl::Status PsClient::Pull(int64_t step, std::vector<TensorOut> tensors) {
  return Blocking([&](Done done) { PullAsync(step, std::move(tensors), std::move(done)); });
}

GrpcPsClient::GrpcPsClient(const ClientOptions& options, KeyMap map,
                           std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : &real_clock_),
      key_map_(std::move(map)),
      builder_(&key_map_, PushRequestBytes(options), FetchRequestBytes(options), options.wire_dtype),
      first_weights_tensors_(options.UsesFirstWeightsLane() ? FirstWeightsTensors(options.layout) : 0),
      executor_(clock_),
      push_queue_(PushBudget(options),
                  {options.coalesce_pushes ? PushRequestBytes(options) : 0,
                   [this](std::vector<uint64_t> ids, std::function<void()> finished) {
                     SendWaitingPushes(std::move(ids), std::move(finished));
                   }}),
      pull_queue_(FetchBudget(options)),
      prefetch_(TensorElements(options.layout), [this](int64_t step, std::vector<TensorOut> tensors, Done done) {
        PullAsync(step, std::move(tensors), std::move(done));
      }) {
  for (size_t s = 0; s < options_.servers.size(); ++s) {
    connections_.push_back(
        std::make_unique<ServerConnection>(static_cast<int>(s), options_, credentials, clock_, &executor_));
    connections_.back()->SetCheckpointRelay(&checkpoint_relay_);
  }
  if (options_.job.replicas > 1) {
    failover_ = std::make_unique<Failover>(*ReplicaMap::Build(options_.job.num_servers, options_.job.replicas),
                                           options_.failover_timeout, KeptPushSteps(options_.job.mode == Mode::kSync));
    std::vector<ServerConnection*> all;
    for (auto& c : connections_) {
      c->SetFailover(failover_.get());
      all.push_back(c.get());
    }
    failover_->Attach(std::move(all));
  }
  heartbeats_ = std::thread([this, start = clock_->Now()] { HeartbeatLoop(start); });
}

absl::StatusOr<std::vector<ServerJoinView>> GrpcPsClient::RegisterWith(const std::vector<int>& servers,
                                                                       std::optional<ResumeAt> resume) {
  std::vector<ServerJoinView> views(servers.size());
  absl::Status status = Blocking([&](Done done) {
    auto fanout = std::make_shared<Fanout>(static_cast<int>(servers.size()), std::move(done));
    for (size_t i = 0; i < servers.size(); ++i) {
      connections_[servers[i]]->Register(resume, [&views, i, fanout](absl::StatusOr<wire::RegisterResponse> r) {
        if (r.ok()) {
          views[i] = ServerJoinView{r->server_id(),        r->current_step(), r->incarnation(),
                                    r->timeline(),         r->awaiting_rewind(), r->initialized(),
                                    r->trained(),          {r->checkpoint_steps().begin(), r->checkpoint_steps().end()}};
        }
        fanout->Finish(r.status());
      });
    }
  });
  if (!status.ok()) return status;
  return views;
}

absl::Status GrpcPsClient::RewindAll(const JoinPlan& plan) {
  auto req = std::make_shared<wire::RewindRequest>();
  req->set_step(plan.step);
  req->set_timeline(plan.timeline);
  for (const auto& [id, incarnation] : plan.restarted) {
    wire::RestartedServer* r = req->add_restarted();
    r->set_server_id(id);
    r->set_incarnation(incarnation);
  }
  std::vector<int64_t> lost(connections_.size(), 0);
  const absl::Status status = Blocking([&](Done done) {
    auto fanout = std::make_shared<Fanout>(static_cast<int>(connections_.size()), std::move(done));
    for (size_t s = 0; s < connections_.size(); ++s) {
      auto resp = std::make_shared<wire::RewindResponse>();
      connections_[s]->Call(
          CallSpec{"rewind", options_.push_timeout, OnAbort::kFail},
          [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t, std::function<void(grpc::Status)> cb) {
            stub.proto->async()->Rewind(ctx, req.get(), resp.get(), std::move(cb));
          },
          [&lost, s, resp, fanout](absl::Status st) {
            if (st.ok()) lost[s] = resp->steps_lost();
            fanout->Finish(st);
          });
    }
  });
  if (!status.ok()) return status;
  rewinds_.fetch_add(1);
  std::vector<std::string> restarted;
  for (const auto& [id, incarnation] : plan.restarted) restarted.push_back(absl::StrCat(id));
  spdlog::warn("server(s) {} restarted: rewound the job to step {}, the newest step every server holds a "
               "checkpoint of; steps lost per server: [{}]",
               absl::StrJoin(restarted, ", "), plan.step, absl::StrJoin(lost, ", "));
  return absl::OkStatus();
}

std::vector<int> GrpcPsClient::ServersNotFailed() const {
  const bool replicated = failover_ != nullptr && failover_->armed();
  const ServerView view = replicated ? failover_->view() : ServerView();
  std::vector<int> servers;
  for (size_t s = 0; s < connections_.size(); ++s) {
    if (!view.Failed(static_cast<int>(s))) servers.push_back(static_cast<int>(s));
  }
  return servers;
}

absl::StatusOr<int64_t> GrpcPsClient::Register() {
  constexpr int kRounds = 8;
  // Weights staged for a step before this registration belong to the old
  // timeline: a rewind may bring the worker back to that very step.
  prefetch_.Forget();
  absl::Status persisting;  // what a look again did not cure
  for (int round = 0; round < kRounds; ++round) {
    // A rewind drops the servers' announced checkpoint step: forget one
    // heard before it (the last round's answers come after any rewind;
    // servers ignore a step of an old timeline anyway).
    checkpoint_relay_.Forget();
    absl::StatusOr<std::vector<ServerJoinView>> views = RegisterWith(ServersNotFailed(), std::nullopt);
    if (!views.ok()) return views.status();
    const JoinPlan plan = PlanJoin(options_.job.mode, *views);
    if (plan.action == JoinPlan::Action::kFail) return plan.error;
    if (plan.action == JoinPlan::Action::kRegisterAgain) {  // a rewind is under way, or the init
      persisting = plan.error;
      if (!persisting.ok()) absl::SleepFor(absl::Milliseconds(50) * (round + 1));  // let the init land
      continue;
    }
    if (plan.action == JoinPlan::Action::kRewind) {
      // Refused when another worker's rewind got there first, or a server
      // restarted again: look at the servers afresh.
      if (absl::Status rewound = RewindAll(plan); !rewound.ok()) {
        if (!absl::IsFailedPrecondition(rewound) && !absl::IsNotFound(rewound)) return rewound;
        spdlog::warn("rewind to step {} not applied: {}; looking again", plan.step, std::string(rewound.message()));
      }
      continue;
    }
    if (!plan.behind.empty()) {
      auto again = RegisterWith(plan.behind, ResumeAt{plan.step, plan.timeline});
      if (absl::IsAborted(again.status())) continue;  // a rewind came in between
      if (!again.ok()) return again.status();
    }
    if (failover_ != nullptr) {
      failover_->SetTimeline(plan.timeline, plan.step);
      failover_->Arm();  // every server answered: from now on silence is a failure
    }
    return plan.step;
  }
  if (!persisting.ok()) return persisting;
  return absl::AbortedError(absl::StrCat("could not line up with the job's servers after ", kRounds, " tries"));
}

absl::Status GrpcPsClient::Init(const std::vector<std::vector<float>>& weights, bool* applied) {
  absl::StatusOr<std::vector<std::shared_ptr<wire::InitRequest>>> reqs =
      builder_.Inits(weights, failover_ != nullptr ? &failover_->map() : nullptr);
  if (!reqs.ok()) return reqs.status();
  auto any_applied = std::make_shared<std::atomic<bool>>(false);
  // Not to servers this worker knows failed: their backups take their keys
  // (the chains in reqs), and a dead server would hold the call for
  // --server_timeout (a worker lining up with the job again after a kill).
  const std::vector<int> servers = ServersNotFailed();
  if (servers.empty()) return absl::UnavailableError("Init: every server of the job is taken for failed");
  const absl::Status status = Blocking([&](Done done) {
    auto fanout = std::make_shared<Fanout>(static_cast<int>(servers.size()), std::move(done));
    for (int s : servers) {
      auto req = (*reqs)[s];
      auto resp = std::make_shared<wire::InitResponse>();
      connections_[s]->Call(
          CallSpec{"init", options_.push_timeout, OnAbort::kRegisterAgain},
          [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
            req->set_session_id(session);
            stub.proto->async()->Init(ctx, req.get(), resp.get(), std::move(cb));
          },
          [fanout, resp, any_applied](absl::Status st) {
            if (st.ok() && resp->outcome() == wire::INIT_APPLIED) any_applied->store(true);
            fanout->Finish(st);
          });
    }
  });
  if (applied != nullptr) *applied = any_applied->load();
  return status;
}

void GrpcPsClient::HeartbeatLoop(absl::Time start) {
  // With replication, often enough to probe a silent server within the failover timeout.
  const absl::Duration every = failover_ != nullptr
                                   ? std::min(options_.heartbeat_interval / 2, options_.failover_timeout / 6)
                                   : options_.heartbeat_interval / 2;
  stop_heartbeats_.RunEvery(*clock_, start, every, [this] {
    for (auto& c : connections_) c->Tend();
  });
}

void GrpcPsClient::Shutdown() {
  if (shut_down_.exchange(true)) return;
  stop_heartbeats_.Stop();
  heartbeats_.join();
  for (auto& c : connections_) c->StopAndCancel();
  executor_.Shutdown();  // retries waiting for their backoff run now, and fail CANCELLED
  for (auto& c : connections_) c->AwaitIdle();
}

ClientStats GrpcPsClient::Stats() const {
  ClientStats s;
  for (const auto& c : connections_) {
    s.retries += c->retries();
    s.registrations += c->registrations();
  }
  s.rewinds = rewinds_;
  return s;
}

namespace {

// Negative sizes are refused; a size past half the message limit is held
// to it (PushRequestBytes).
absl::Status CheckRequestBytes(const ClientOptions& options) {
  for (auto [name, bytes] : {std::pair{"push_request_bytes", options.push_request_bytes},
                             {"fetch_request_bytes", options.fetch_request_bytes}}) {
    if (bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " is ", bytes, "; want 0 (one partition) or more"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const ClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no servers given");
  if (static_cast<int>(options.servers.size()) != options.job.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(options.servers.size(), " server addresses given; the job has ",
                                                   options.job.num_servers, " servers"));
  }
  if (options.rank < 0 || options.rank >= options.job.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is not in [0, ", options.job.num_workers, ")"));
  }
  // Each is a wait or a period: zero or less would fail every call at once,
  // or (heartbeats) send without pause.
  for (const auto& [name, value] : {std::pair<const char*, absl::Duration>{"server_timeout", options.server_timeout},
                                    {"pull_timeout", options.pull_timeout},
                                    {"push_timeout", options.push_timeout},
                                    {"heartbeat_interval", options.heartbeat_interval}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " is ", absl::FormatDuration(value), "; want more than 0"));
    }
  }
  if (absl::StatusOr<ReplicaMap> replicas = ReplicaMap::Build(options.job.num_servers, options.job.replicas);
      !replicas.ok()) {
    return replicas.status();
  }
  if (options.failover_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("server_timeout_for_failover must be positive");
  }
  if (absl::Status s = CheckTcpCongestion(options.tcp_congestion); !s.ok()) return s;
  if (absl::Status s = CheckRequestBytes(options); !s.ok()) return s;
  absl::StatusOr<KeyMap> map = KeyMap::Build(options.layout, options.job.num_servers, options.job.partition_bytes);
  if (!map.ok()) return map.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  ClientOptions o = options;
  o.job.layout_hash = LayoutHash(options.layout);
  return std::unique_ptr<PsClient>(new GrpcPsClient(o, *std::move(map), *std::move(credentials)));
}

}  // namespace shardps
