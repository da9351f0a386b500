#include "client/failover.h"

#include <algorithm>
#include <string>

#include "common/atomic_max.h"
#include "spdlog/spdlog.h"

namespace shardps {

ServerConnection* Failover::Serving(int server) const {
  const int serving = ServingId(server);
  return serving < 0 ? nullptr : connections_[serving];
}

bool Failover::MarkFailed(int server, absl::string_view why, uint32_t seen_generation) {
  ServerView v = view();
  if (v.generation(server) != seen_generation) return false;
  v.MarkFailed(server);
  Merge(v, why);
  return true;
}

void Failover::Merge(const ServerView& incoming, absl::string_view why) {
  if (incoming.Pristine()) return;
  const SharedServerView::Change change = view_.Merge(incoming);
  const ServerView& before = change.before;
  const ServerView& now = change.now;
  const std::vector<int>& rose = change.rose;
  // Registering: no calls to move yet, and no session to take to a server
  // live again (the registration in progress covers every server).
  if (rose.empty() || !armed()) return;
  std::vector<int> down, revived;
  for (int s : rose) {
    if (s >= static_cast<int>(connections_.size())) continue;
    // Live before and risen since: it failed, or restarted and joins again.
    if (before.Live(s)) down.push_back(s);
    if (now.Joining(s)) {
      spdlog::info("server {} joins the job again: its peers copy it its keys", s);
      connections_[s]->Renew();
    }
    if (now.Live(s)) revived.push_back(s);
  }
  // First: calls for a server live again wait for this worker's registration there.
  for (int s : revived) {
    spdlog::warn("server {} is live again with a copy of its keys ({}): registering with it", s, std::string(why));
    connections_[s]->Revive();
  }
  for (int s : down) {
    const int serving = map_.Serving(s, now);
    if (serving < 0) {
      spdlog::error("server {} failed ({}) and so did every copy of its keys: waiting for it to come back", s,
                    std::string(why));
    } else {
      spdlog::warn("server {} failed ({}): its keys are served by server {} from now on", s, std::string(why),
                   serving);
    }
    connections_[s]->CancelInFlight();  // calls waiting on it go to the backup now
    if (now.Failed(s)) connections_[s]->TellFailed();  // if it is only paused, it steps down when it resumes
  }
  PushKeptAgain();
}

void Failover::NoteMoved(absl::string_view text) {
  const std::optional<std::vector<int>> changed = moved_.Merge(text);
  if (!changed.has_value()) return;
  for (int s : *changed) {
    const std::optional<std::string> address = moved_.AddressOf(s);
    if (s < static_cast<int>(connections_.size()) && address.has_value()) connections_[s]->Repoint(*address);
  }
}

void Failover::PushKeptAgain() {
  if (view_.Pristine()) return;  // every push went to the server serving it
  const ServerView now = view();
  std::vector<Kept> again;
  {
    absl::MutexLock lock(&mu_);
    for (Kept& k : kept_) {
      const int serving = map_.Serving(k.server, now);
      if (serving < 0 || serving == k.sent_to) continue;
      k.sent_to = serving;
      again.push_back(k);
    }
  }
  for (const Kept& k : again) {
    CallSpec spec = k.spec;
    spec.keys_of = k.server;
    connections_[k.sent_to]->Call(spec, k.attempt, [server = k.server, step = k.step](absl::Status st) {
      if (!st.ok()) {
        spdlog::warn("the push of step {} kept for server {} was refused by the server now serving its keys: {}",
                     step, server, std::string(st.message()));
      }
    });
  }
}

void Failover::SetTimeline(int64_t timeline, int64_t step) {
  absl::MutexLock lock(&mu_);
  if (timeline_.exchange(timeline) == timeline) return;
  kept_.clear();
  last_step_ = step - 1;  // every step before the job's has been pushed
}

void Failover::Retain(int server, int acked_by, int64_t step, const CallSpec& spec,
                      const ServerConnection::Attempt& attempt, int64_t timeline, bool rows) {
  const int64_t keep = rows ? keep_steps_ + kExtraKeptRowSteps : keep_steps_;
  {
    absl::MutexLock lock(&mu_);  // SetTimeline changes the timeline under it
    if (timeline != timeline_) return;
    RaiseTo(last_step_, step);
    const auto done_with = [&](const Kept& k) { return k.server == server && k.rows == rows && k.step <= step - keep; };
    kept_.erase(std::remove_if(kept_.begin(), kept_.end(), done_with), kept_.end());
    kept_.push_back(Kept{server, acked_by, step, rows, spec, attempt});
  }
  // After the push is kept: a Merge that marked acked_by down meanwhile
  // either found it kept or changed the view before this reads it.
  PushKeptAgain();
}

}  // namespace shardps
