#include "server/replica_joiner.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/reconnect_args.h"
#include "common/rpc_metadata.h"
#include "common/security.h"
#include "server/view_metadata.h"
#include "spdlog/spdlog.h"

namespace shardps {

bool AnyPeerRunsJob(const std::vector<std::string>& peers, int self,
                    const std::shared_ptr<grpc::ChannelCredentials>& credentials, const std::string& auth_token,
                    absl::Duration wait) {
  for (int s = 0; s < static_cast<int>(peers.size()); ++s) {
    if (s == self) continue;
    auto stub = wire::ParameterService::NewStub(grpc::CreateChannel(peers[s], credentials));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait));
    if (!auth_token.empty()) ctx.AddMetadata(kAuthorizationKey, kBearerPrefix + auth_token);
    wire::JoinRequest req;
    req.set_server_id(self);
    wire::JoinResponse resp;
    if (stub->Join(&ctx, req, &resp).ok() && resp.initialized()) return true;
  }
  return false;
}

ReplicaJoiner::ReplicaJoiner(ParameterServer* core, ReplicaJoinerOptions options)
    : core_(core), options_(std::move(options)) {
  // --join's list is this server's view of its peers' addresses (moves
  // learned later apply to it: ParameterServer::Peers).
  if (!options_.peers.empty()) core_->NotePeers(options_.peers);
  thread_ = std::thread([this] { Run(); });
}

bool ReplicaJoiner::HaveStubs() {
  // The workers' addresses once they registered, else --join's; either with
  // every server that joined at a new address since where it is now.
  std::vector<std::string> peers = core_->Peers();
  if (peers.empty()) peers = options_.peers;
  if (static_cast<int>(peers.size()) <= core_->server_id()) return false;
  if (!stubs_.empty() && peers == peers_) return true;
  peers_ = std::move(peers);
  stubs_.clear();
  for (const std::string& address : peers_) {
    grpc::ChannelArguments args;
    for (const auto& [name, value] : ReconnectArgs(options_.connect_timeout)) args.SetInt(name, value);
    stubs_.push_back(wire::ParameterService::NewStub(grpc::CreateCustomChannel(address, options_.credentials, args)));
  }
  return true;
}

ReplicaJoiner::~ReplicaJoiner() {
  stop_.Notify();
  thread_.join();
}

std::optional<wire::JoinResponse> ReplicaJoiner::Ask(int s, ServerView* theirs) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  if (!options_.auth_token.empty()) ctx.AddMetadata(kAuthorizationKey, kBearerPrefix + options_.auth_token);
  for (const auto& [key, value] : ViewMetadata(*core_)) ctx.AddMetadata(key, value);
  wire::JoinRequest req;
  req.set_server_id(core_->server_id());
  wire::JoinResponse resp;
  const grpc::Status status = stubs_[s]->Join(&ctx, req, &resp);
  NoteViewMetadata(ctx.GetServerTrailingMetadata(), *core_, theirs);
  if (!status.ok()) {
    spdlog::debug("join: server {} at {}: {}", s, peers_[s], status.error_message());
    return std::nullopt;
  }
  return resp;
}

bool ReplicaJoiner::FindJob(wire::JoinResponse* job, ServerView* view) {
  absl::Time last_log = absl::Now();
  for (;;) {
    if (core_->Stats().initialized) {
      spdlog::info("--join: initialised by the job's workers (a new job): nothing to join");
      return false;
    }
    HaveStubs();  // a peer that moved, learned from another's answer
    for (int s = 0; s < static_cast<int>(stubs_.size()); ++s) {
      if (s == core_->server_id()) continue;
      std::optional<wire::JoinResponse> r = Ask(s, view);
      if (r && r->initialized()) {
        *job = *std::move(r);
        return true;
      }
    }
    if (absl::Now() - last_log >= options_.log_every) {
      last_log = absl::Now();
      spdlog::warn("--join: waiting for a server of the job that runs it (asked {})", absl::StrJoin(peers_, ", "));
    }
    if (Stopping(options_.poll)) return false;
  }
}

void ReplicaJoiner::TellPeers(const char* what) {
  std::vector<bool> told(stubs_.size(), false);
  told[core_->server_id()] = true;
  absl::Time last_log = absl::Now();
  for (;;) {
    HaveStubs();  // a peer that moved, learned from another's answer
    const ServerView view = core_->View();
    bool all = true;
    for (size_t s = 0; s < stubs_.size(); ++s) {
      if (told[s] || view.Failed(static_cast<int>(s))) continue;
      told[s] = Ask(static_cast<int>(s)).has_value();
      all = all && told[s];
    }
    if (all) return;
    if (absl::Now() - last_log >= options_.log_every) {
      last_log = absl::Now();
      spdlog::warn("--join: telling the job's servers that this one {}: some have not answered yet", what);
    }
    if (Stopping(options_.poll)) return;
  }
}

bool ReplicaJoiner::JoinAtStart() {
  if (!HaveStubs()) return false;
  wire::JoinResponse job;
  ServerView view;  // the peers' (this server's own is still pristine: it knows nothing)
  if (!FindJob(&job, &view)) return false;
  absl::StatusOr<Layout> layout = LayoutFromProto(job.layout());
  if (!layout.ok()) {
    spdlog::error("--join: the job's layout does not parse: {}", std::string(layout.status().message()));
    return false;
  }
  if (absl::Status joined = core_->BeginJoin(*layout, job.timeline(), view); !joined.ok()) {
    spdlog::info("--join: {}", std::string(joined.message()));
    return false;
  }
  return true;
}

bool ReplicaJoiner::Announce() {
  const int self = core_->server_id();
  // Where the others reach it: a spare's new address goes with its joining
  // (its own --join entry; without --join, where the job knew it).
  core_->NoteOwnAddress(options_.peers.empty() ? peers_[self] : options_.peers[self]);
  TellPeers("joins");
  absl::Time last_log = absl::Now();
  while (!core_->View().Live(self)) {
    if (Stopping(options_.poll)) return false;
    if (core_->View().Failed(self)) {
      spdlog::error("join: this server was taken for failed while its keys were copied to it (servers {})",
                    core_->View().DebugString());
      return false;
    }
    if (absl::Now() - last_log >= options_.log_every) {
      last_log = absl::Now();
      spdlog::warn("join: {} keys not yet copied to this server (servers {})", core_->Stats().keys_to_copy,
                   core_->View().DebugString());
    }
  }
  TellPeers("is live again");
  return true;
}

void ReplicaJoiner::Run() {
  if (options_.join_at_start && JoinAtStart()) Announce();
  // From now on: a server that stepped down while it lived joins again.
  while (!Stopping(options_.poll)) {
    if (!core_->View().Failed(core_->server_id()) || !core_->Stats().initialized || !HaveStubs()) continue;
    if (absl::Status rejoined = core_->Rejoin(); !rejoined.ok()) continue;
    Announce();
  }
}

}  // namespace shardps
