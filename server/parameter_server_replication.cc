// ParameterServerImpl: replication (DESIGN.md, "Replication";
// common/replica_map.h). With --replicas=2 a server holds its own keys and
// those of the server before it. After a sync step it forwards the keys it
// serves, whole (weights and optimizer slots), to their next copy; a pull of
// that version waits until the copy has acknowledged it, so no worker reads
// a version that the backup lacks. When workers report a server failed
// (request metadata), its backup serves its keys from the version it has,
// and the workers push again what that version lacks; a server named failed
// steps down.
#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"
#include "server/payload_validation.h"
#include "spdlog/spdlog.h"

namespace shardps {

absl::Status ParameterServerImpl::CheckServing(const KeyState& k) const {
  if (!Replicating()) return absl::OkStatus();
  const ServerView view = View();
  const int primary = k.info.server;
  const int serving = replicas_->Serving(primary, view);
  const int self = options_.server_id;
  if (serving == self) return absl::OkStatus();
  if (view.Failed(self)) {
    return absl::UnavailableError(absl::StrCat("server ", self, " stepped down (servers ", view.DebugString(),
                                               "): key ", KeyName(k.info.key), " is served by server ", serving));
  }
  if (view.Joining(self)) {
    return absl::UnavailableError(absl::StrCat("server ", self, " is joining the job (its keys are being copied to "
                                               "it): key ", KeyName(k.info.key), " is served by server ", serving));
  }
  if (!view.Pristine()) {
    return absl::UnavailableError(absl::StrCat("server ", self, " holds key ", KeyName(k.info.key),
                                               " as a copy; server ", serving, " serves it (servers ",
                                               view.DebugString(), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat("server ", self, " holds key ", KeyName(k.info.key),
                                                    " as a backup of server ", primary, ", which serves it"));
}

int ParameterServerImpl::NextCopy(const KeyState& k) const {
  if (!Replicating() || options_.replica_link == nullptr) return -1;
  return replicas_->NextCopy(k.info.server, options_.server_id, View());
}

int ParameterServerImpl::GateCopy(const KeyState& k) const {
  if (!Replicating() || options_.replica_link == nullptr) return -1;
  // Sync: a joining copy too, so that the joiner, once live, holds every
  // version a worker has read (the pulls of the step after the copy wait
  // for it: one step's delay). Async and ssp read the newest acknowledged
  // version, which a joiner would hold back to before the failover.
  const bool with_joining = options_.job.mode == Mode::kSync;
  return replicas_->NextCopy(k.info.server, options_.server_id, View(), with_joining);
}

bool ParameterServerImpl::ReplicatedFor(const KeyState& k, int64_t step) const {
  return k.replicated_version >= step || GateCopy(k) < 0;
}

void ParameterServerImpl::PinAcknowledged(KeyState& k) {
  if (options_.job.replicas > 1) k.replicated_weights = k.weights;
}

void ParameterServerImpl::PinAcknowledgedAll() {
  if (options_.job.replicas <= 1) return;
  for (size_t i = 0; i < table_->size(); ++i) {
    KeyState& k = table_->key(i);
    absl::MutexLock lock(&k.mu);
    PinAcknowledged(k);
  }
}

void ParameterServerImpl::QueueReplica(KeyState& k) {
  if (NextCopy(k) < 0 || !CheckServing(k).ok()) return;
  ReplicaUpdate u{k.info.key, k.version, k.weights, k.slots, k.last_pushed_step};
  // Sync: the pushes of the steps the version completed. (A worker may have
  // pushed the next step already; that push is not in this state.)
  if (options_.job.mode == Mode::kSync) std::fill(u.last_pushed_step.begin(), u.last_pushed_step.end(), u.version - 1);
  absl::MutexLock lock(&replicas_mu_);
  outgoing_.push_back(std::move(u));
}

void ParameterServerImpl::FlushReplicas() {
  if (!Replicating() || options_.replica_link == nullptr) return;
  {
    // Rows reach the link in the order they were queued: a copy installs
    // each update's rows whole, so an older one must not land after a newer.
    absl::MutexLock order(&rows_flush_mu_);
    std::vector<RowsReplica> rows;
    int64_t timeline;
    {
      absl::MutexLock lock(&replicas_mu_);  // a rewind sets the timeline under it
      rows.swap(outgoing_rows_);
      timeline = timeline_;
    }
    FlushRows(std::move(rows), timeline);
  }
  std::vector<ReplicaUpdate> updates;
  SentAs as;
  {
    absl::MutexLock lock(&replicas_mu_);
    updates.swap(outgoing_);
    as.timeline = timeline_;
  }
  if (updates.empty()) return;
  // Grouped by the copy they go to (one per primary this server serves).
  std::map<int, std::vector<ReplicaUpdate>> by_copy;
  for (ReplicaUpdate& u : updates) {
    const int to = NextCopy(table_->at(u.key));
    if (to >= 0) by_copy[to].push_back(std::move(u));
  }
  for (auto& [to, group] : by_copy) {
    std::vector<ReplicaUpdate> sent;  // what the acknowledgement confirms (weights shared, no slots)
    int64_t bytes = 0;
    for (const ReplicaUpdate& u : group) {
      sent.push_back(ReplicaUpdate{u.key, u.version, u.weights, {}, u.last_pushed_step});
      bytes += u.Bytes();
    }
    replica_keys_sent_.fetch_add(static_cast<int64_t>(group.size()));
    replica_bytes_sent_.fetch_add(bytes);
    as.standing = OwnGeneration();
    auto done = [this, to = to, sent = std::move(sent), as](absl::Status status) {
      OnReplicaSent(to, sent, status, as);
    };
    options_.replica_link->Send(options_.server_id, to, as.timeline, std::move(group), std::move(done));
  }
}

void ParameterServerImpl::FlushRows(std::vector<RowsReplica> rows, int64_t timeline) {
  if (rows.empty()) return;
  const ServerView view = View();
  std::map<int, std::vector<RowsReplica>> by_copy;
  for (RowsReplica& r : rows) {
    const int to = replicas_->NextCopy(r.primary, options_.server_id, view);
    if (to < 0) continue;
    replica_bytes_sent_.fetch_add(r.Bytes());
    by_copy[to].push_back(std::move(r));
  }
  for (auto& [to, group] : by_copy) {
    std::vector<RowsReplica> sent;  // what the acknowledgement confirms
    for (const RowsReplica& r : group) {
      sent.push_back(RowsReplica{r.primary, r.table, r.version, 0, nullptr, nullptr, r.last_pushed_step, r.copy_done});
    }
    const SentAs as{OwnGeneration(), timeline};
    auto done = [this, to = to, sent = std::move(sent), as](absl::Status status) { OnRowsSent(to, sent, status, as); };
    options_.replica_link->SendRows(options_.server_id, to, timeline, std::move(group), std::move(done));
  }
}

uint32_t ParameterServerImpl::OwnGeneration() { return View().generation(options_.server_id); }

bool ParameterServerImpl::AnswerIgnored(const absl::Status& status, SentAs as) const {
  return absl::IsAborted(status) || as.timeline != timeline_;
}

void ParameterServerImpl::OnReplicaSent(int to, const std::vector<ReplicaUpdate>& sent, const absl::Status& status,
                                        SentAs as) {
  if (shut_down_ || AnswerIgnored(status, as)) return;
  if (status.ok()) {
    // On the link's thread, which holds no lock: no rewind runs meanwhile.
    absl::ReaderMutexLock state(&rewind_mu_);
    if (as.timeline != timeline_) return;
    for (const ReplicaUpdate& u : sent) {
      KeyState& k = table_->at(u.key);
      absl::MutexLock lock(&k.mu);
      for (size_t r = 0; r < u.last_pushed_step.size() && r < k.replicated_pushed_step.size(); ++r) {
        k.replicated_pushed_step[r] = std::max(k.replicated_pushed_step[r], u.last_pushed_step[r]);
      }
      if (u.version <= k.replicated_version) continue;
      k.replicated_weights = u.weights;
      k.replicated_version = u.version;
    }
    WakeReadyPulls();
    return;
  }
  // A server that stepped down has no say about others (it may be one that
  // was paused, whose sends timed out while it did not run), nor has one
  // that joins again after stepping down: what fails now was sent before,
  // and a link it could not use then says nothing of the peer to a job
  // that has gone on without it (two servers that cannot reach each other
  // would otherwise both end up failed). Nor has a send made before this
  // server stepped down and came back: its standing then was another.
  ServerView failed = View();
  if (!failed.Live(options_.server_id) || failed.generation(options_.server_id) != as.standing) return;
  if (absl::IsFailedPrecondition(status)) {
    spdlog::error("server {}: server {} has taken over its keys ({}); stepping down", options_.server_id, to,
                  std::string(status.message()));
    failed.MarkFailed(options_.server_id);
  } else {
    spdlog::error("server {}: its backup, server {}, did not take the updates ({}); taken for failed: its keys now "
                  "have a single copy",
                  options_.server_id, to, std::string(status.message()));
    failed.MarkFailed(to);
  }
  NoteView(failed);
}

void ParameterServerImpl::NoteView(const ServerView& view) {
  if (!Replicating() || view.Pristine()) return;
  const SharedServerView::Change change = view_.Merge(view);
  const std::vector<int>& rose = change.rose;
  const ServerView& now = change.now;
  if (rose.empty()) return;
  const int self = options_.server_id;
  if (std::find(rose.begin(), rose.end(), self) != rose.end() && now.Failed(self)) {
    spdlog::error("server {} is named failed (servers {}): it steps down and serves no key; its backups "
                  "serve them",
                  self, now.DebugString());
    for (PendingPull& p : waiters_.TakeAll()) {
      p.done(absl::UnavailableError(absl::StrCat("server ", self, " stepped down (servers ", now.DebugString(),
                                                 "); its keys are served by their backups")));
    }
    return;
  }
  for (int s : rose) {
    if (s == self) continue;
    if (now.Failed(s)) {
      spdlog::warn("server {} learns that server {} failed: it serves the keys it backs up for it", self, s);
    } else if (now.Joining(s)) {
      spdlog::warn("server {} learns that server {} joins the job: it copies it the keys it serves that {} holds",
                   self, s, s);
      if (options_.replica_link != nullptr) options_.replica_link->Renew(s);
      if (initialized_) CopyAllTo(s);
    } else {
      spdlog::warn("server {} learns that server {} is live again, with a copy of every key it holds", self, s);
    }
  }
  if (!initialized_) return;
  absl::ReaderMutexLock state(&rewind_mu_);
  CompleteReadySyncSteps();
  WakeReadyPulls();  // pulls that waited for a failed copy's acknowledgement
  for (SparseStore* rows : RowStores()) rows->WakeReady();
}

void ParameterServerImpl::InstallReplica(KeyState& k, const ReplicaUpdate& u) {
  // The received buffer becomes the key's weights, not a copy of them: every
  // write goes through UpdateWeights, which writes a buffer in place only
  // when nothing else holds it (server/key_state.h).
  k.weights = std::const_pointer_cast<std::vector<float>>(u.weights);
  k.slots = u.slots;
  k.version = u.version;
  k.replicated_version = u.version;
  PinAcknowledged(k);
  // A push the state includes, sent again after a failover, is a duplicate.
  if (u.last_pushed_step.size() == k.last_pushed_step.size()) k.last_pushed_step = u.last_pushed_step;
  k.grad_sum.clear();
  k.contributed.clear();
  k.held.clear();
  k.contributors = 0;
  k.next_rank = 0;
  checkpointer_.OnApplied(k.index, k);
}

absl::Status ParameterServerImpl::AdmitCopies(int from, int64_t timeline, const char* what) {
  if (!Replicating()) {
    return Refuse(absl::FailedPreconditionError(
        absl::StrCat("server ", options_.server_id, " keeps no copies (--replicas=1); server ", from, " sent ", what)));
  }
  if (!initialized_) {
    return absl::UnavailableError(absl::StrCat("server ", options_.server_id, " is not initialised yet"));
  }
  if (timeline < timeline_) {
    return absl::AbortedError(absl::StrCat("server ", options_.server_id, " is on timeline ", timeline_.load(),
                                           "; server ", from, " sent ", what, " of timeline ", timeline,
                                           ", which the job left (a rewind): dropped"));
  }
  if (timeline > timeline_) {
    return absl::OutOfRangeError(absl::StrCat("server ", options_.server_id, " is on timeline ", timeline_.load(),
                                              " and has not rewound to timeline ", timeline, " yet"));
  }
  return absl::OkStatus();
}

bool ParameterServerImpl::TryCopyLock() {
  // A try that fails while no rewind runs (another writer's moment: a
  // join, the shutdown; or a spurious failure) is tried again.
  while (rewinding_.load() == 0) {
    if (rewind_mu_.ReaderTryLock()) return true;
    absl::SleepFor(absl::Microseconds(100));
  }
  return false;
}

absl::Status ParameterServerImpl::Rewinding() const {
  return absl::OutOfRangeError(absl::StrCat("server ", options_.server_id, " is rewinding; try again"));
}

absl::Status ParameterServerImpl::ApplyReplica(int from, int64_t timeline, const std::vector<ReplicaUpdate>& updates) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  if (!TryCopyLock()) return Rewinding();
  const absl::Cleanup unlock = [this] { rewind_mu_.ReaderUnlock(); };
  if (absl::Status admitted = AdmitCopies(from, timeline, "updates"); !admitted.ok()) return admitted;
  const ServerView view = View();
  if (!view.Live(from)) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat("server ", options_.server_id,
                                                             " has taken over the keys of server ", from,
                                                             " (servers ", view.DebugString(),
                                                             "): server ", from, " must step down")));
  }
  std::vector<KeyState*> states;
  for (const ReplicaUpdate& u : updates) {
    absl::StatusOr<KeyState*> k = table_->Find(u.key);
    if (!k.ok()) return Refuse(k.status());
    if (replicas_->Serving((*k)->info.server, view) != from) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("server ", from, " sent key ", KeyName(u.key),
                                                            ", which it does not serve")));
    }
    if (u.weights == nullptr || static_cast<int64_t>(u.weights->size()) != (*k)->info.length ||
        u.slots.size() != (*k)->slots.size() ||
        std::any_of(u.slots.begin(), u.slots.end(), [&](const auto& s) { return s.size() != u.weights->size(); })) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("replica of key ", KeyName(u.key), " from server ", from,
                                                            " has the wrong size")));
    }
    if (absl::Status steps = CheckReplicaSteps(u.version, u.last_pushed_step); !steps.ok()) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("replica of key ", KeyName(u.key), " from server ", from,
                                                            ": ", steps.message())));
    }
    states.push_back(*k);
  }
  const bool joining = keys_to_copy_.load() > 0;
  for (size_t i = 0; i < updates.size(); ++i) {
    KeyState& k = *states[i];
    {
      absl::MutexLock lock(&k.mu);
      // Joining: the first copy of each key is installed whatever its version.
      if (updates[i].version > k.version || (joining && !copied_[k.index].load())) InstallReplica(k, updates[i]);
    }
    if (joining) NoteCopied(k.index);
  }
  replica_keys_installed_.fetch_add(static_cast<int64_t>(updates.size()));
  return absl::OkStatus();
}

void ParameterServerImpl::NotePeers(const std::vector<std::string>& addresses) {
  // Only a whole list: a registration's may be wrong (it is checked after this).
  if (Replicating() && options_.replica_link != nullptr &&
      static_cast<int>(addresses.size()) == options_.job.num_servers) {
    options_.replica_link->SetPeers(addresses);
    absl::MutexLock lock(&peers_mu_);
    if (peers_.empty()) peers_ = addresses;
  }
}

size_t ParameterServerImpl::ServedKeys() {
  if (!Replicating()) return table_->size();
  const ServerView view = View();
  absl::MutexLock lock(&served_mu_);
  if (!served_view_.has_value() || !(*served_view_ == view)) {
    served_keys_ = 0;
    for (size_t i = 0; i < table_->size(); ++i) served_keys_ += CheckServing(table_->key(i)).ok() ? 1 : 0;
    served_view_ = view;
  }
  return served_keys_;
}

int64_t ParameterServerImpl::UnderReplicatedKeys() const {
  if (!Replicating() || !initialized_) return 0;
  int64_t n = 0;
  for (size_t i = 0; i < table_->size(); ++i) {
    const KeyState& k = table_->key(i);
    if (CheckServing(k).ok() && GateCopy(k) < 0) ++n;
  }
  return n;
}

int64_t ParameterServerImpl::KeysAwaitingCopy() const {
  if (!Replicating() || !initialized_) return 0;
  int64_t n = 0;
  for (size_t i = 0; i < table_->size(); ++i) {
    const KeyState& k = table_->key(i);
    if (CheckServing(k).ok() && !ReplicatedFor(k, k.version)) ++n;
  }
  return n;
}

}  // namespace shardps
