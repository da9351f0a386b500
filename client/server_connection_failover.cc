// ServerConnection (client/server_connection.h): its part in replication
// (client/failover.h): the view of the job's servers that answers carry,
// calls handed to the server serving this one's keys, a silent server taken
// for failed, and registering with a server that is live again.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/failover.h"
#include "client/server_connection.h"
#include "common/rpc_metadata.h"
#include "spdlog/spdlog.h"

namespace shardps {

void ServerConnection::Revive() {
  {
    absl::MutexLock lock(&mu_);
    // Once per standing: a call that found the session stale may have
    // revived the connection already, between Failover::Merge's store of
    // the view and its call here. A second registration would replace the
    // session the calls since then carry (a server keeps one per rank).
    const uint32_t generation = Generation();
    if (reviving_ || stopped_ || revival_generation_ == generation) return;
    reviving_ = true;
    revival_generation_ = generation;
  }
  // Not the channels that failed while it was down (some may still be
  // waiting out a reconnection backoff, failing calls at once).
  Renew();
  Register(failover_->RevivalPoint(), [this](absl::StatusOr<wire::RegisterResponse> r) {
    if (!r.ok()) {
      spdlog::warn("registering with server {}, live again: {}", server_id_, std::string(r.status().message()));
    }
    std::vector<std::shared_ptr<CallState>> held;
    {
      absl::MutexLock lock(&mu_);
      reviving_ = false;
      held.swap(held_for_revival_);
    }
    for (auto& call : held) StartAttempt(std::move(call));
  });
}

void ServerConnection::NoteServerView(const grpc::ClientContext& ctx) {
  if (failover_ == nullptr) return;
  const auto& metadata = ctx.GetServerTrailingMetadata();
  // The moves first: a server the view shows live again is registered with where it is now.
  if (auto moved = metadata.find(kServerMovedKey); moved != metadata.end()) {
    failover_->NoteMoved(absl::string_view(moved->second.data(), moved->second.size()));
  }
  auto it = metadata.find(kServerViewKey);
  if (it == metadata.end()) return;
  if (const std::optional<ServerView> view = ServerView::Parse(absl::string_view(it->second.data(), it->second.size()))) {
    failover_->Merge(*view, absl::StrCat("server ", server_id_, " says so"));
  }
}

bool ServerConnection::Redirect(const std::shared_ptr<CallState>& call) {
  if (failover_ == nullptr || !call->spec.fails_over) return false;
  if (call->spec.keys_of < 0) call->spec.keys_of = server_id_;
  ServerConnection* next = failover_->Serving(call->spec.keys_of);
  if (next == nullptr || next == this) return false;
  next->Call(call->spec, call->attempt, std::move(call->done));
  call->done = nullptr;
  absl::MutexLock lock(&mu_);
  --calls_in_flight_;
  return true;
}

bool ServerConnection::ProbeForFailover() {
  if (failover_ == nullptr || !failover_->armed()) return false;
  const absl::Time now = clock_->Now();
  const absl::Duration timeout = failover_->timeout();
  bool probe = false, silent_too_long = false;
  absl::Duration silent;
  {
    absl::MutexLock lock(&mu_);
    // This process did not run for a while (paused, or starved on a busy
    // machine): that time is its own silence, not the server's. It is taken
    // off the server's silence and the probe's age, which keep what they
    // had counted before (starting again from zero at every hiccup would put
    // failover off for as long as a busy machine keeps having them).
    if (const absl::Duration gap = now - last_tend_; last_tend_ != absl::InfinitePast() && gap > timeout / 2) {
      last_answer_ = std::min(now, last_answer_ + gap);
      if (last_probe_ != absl::InfinitePast()) last_probe_ = std::min(now, last_probe_ + gap);
    }
    last_tend_ = now;
    if (calls_in_flight_ == 0 || session_ == 0 || stopped_) return false;
    silent = now - last_answer_;
    // A probe (a heartbeat) goes out every third of the timeout while the
    // server is silent; silence past the timeout with the last probe a
    // third of it old and unanswered is a failure. The two share one
    // spacing: had the failure waited longer for its probe than probes are
    // spaced (half the timeout, as it did), each tend found the probe too
    // young, sent a new one, and never took the server for failed (tends
    // come every sixth of the timeout: three of them reach half of it only
    // as closely as the clock allows).
    const absl::Duration probe_every = timeout / 3;
    const bool probe_due = now - last_probe_ >= probe_every;
    if (silent >= timeout && last_probe_ != absl::InfinitePast() && probe_due) {
      silent_too_long = true;
    } else if (silent >= probe_every && probe_due) {
      probe = true;
      last_probe_ = now;
    }
  }
  if (probe) SendHeartbeat();  // a live server answers it, however long its pulls wait
  if (!silent_too_long) return false;
  // This cancels the calls waiting here: they retry, and go to the backup.
  TakeForFailed(absl::StrCat("no answer for ", absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                             ", heartbeats included (--server_timeout_for_failover ", absl::FormatDuration(timeout),
                             ")"),
                Generation());
  return true;
}

void ServerConnection::TakeForFailed(const std::string& why, uint32_t seen_generation) {
  failover_->MarkFailed(server_id_, why, seen_generation);
}

uint32_t ServerConnection::Generation() const {
  return failover_ == nullptr ? 0 : failover_->view().generation(server_id_);
}

bool ServerConnection::SessionStale() const {
  if (failover_ == nullptr || !failover_->armed() || reviving_ || stopped_ || session_ == 0) return false;
  const ServerView view = failover_->view();
  const uint32_t now = view.generation(server_id_);
  return view.Live(server_id_) && now != session_generation_ && now != revival_generation_;
}

}  // namespace shardps
