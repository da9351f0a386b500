// ParameterServerImpl: a server joining a running replicated job
// (DESIGN.md, "Replication": re-replication; ps_server --join). The joiner
// builds its keys empty from a peer's layout and marks itself joining in
// the job's view (common/replica_map.h); every server that learns it copies
// it, whole, the keys it serves that the joiner holds, and forwards their
// updates to it from then on (sync pulls wait for the joining copy, async
// and ssp ones do not: GateCopy). Once every key it holds has been copied,
// the joiner marks itself live: it backs its keys up again, and serves them
// should the other copy's server fail.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"
#include "spdlog/spdlog.h"

namespace shardps {

JoinInfo ParameterServerImpl::AnswerJoin(int from) {
  JoinInfo info;
  absl::ReaderMutexLock state(&rewind_mu_);
  info.timeline = timeline_;
  // A server that is joining itself has nothing to give yet; one whose job
  // has not trained yet is starting with the joiner (its workers will
  // initialise both), and one that restored a checkpoint and awaits the
  // job's rewind is restarting with it (the joiner restores its own).
  if (!initialized_ || awaiting_rewind_ || keys_to_copy_.load() > 0 || View().Joining(options_.server_id) ||
      table_->VersionRange().second == 0) {
    return info;
  }
  info.initialized = true;
  info.layout = table_->map().layout();
  spdlog::info("server {} asks to join: told the job's layout and timeline {}", from, info.timeline);
  return info;
}

absl::Status ParameterServerImpl::BeginJoin(const Layout& layout, int64_t timeline, const ServerView& view) {
  if (!Replicating()) return absl::FailedPreconditionError("--join needs --replicas > 1");
  absl::StatusOr<KeyMap> map = KeyMap::Build(layout, options_.job.num_servers, options_.job.partition_bytes);
  if (!map.ok()) return map.status();
  const int self = options_.server_id;
  ServerView joined;
  {
    absl::WriterMutexLock state(&rewind_mu_);
    absl::MutexLock lock(&init_mu_);
    if (initialized_) {
      return absl::FailedPreconditionError(absl::StrCat("server ", self, " is initialised already (by the job's "
                                                        "workers: a new job), nothing to join"));
    }
    InstallKeys(*std::move(map));
    timeline_ = timeline;
    joined = AwaitCopies(view);
  }
  spdlog::warn("server {} joins the job (timeline {}): {} keys, {} bytes of weights (and their optimizer slots) to "
               "be copied from the servers that serve them (servers {})",
               self, timeline, table_->size(), table_->owned_bytes(), joined.DebugString());
  if (table_->size() == 0) NoteCopied(0);  // nothing to wait for
  return absl::OkStatus();
}

absl::Status ParameterServerImpl::Rejoin() {
  const int self = options_.server_id;
  ServerView joined;
  {
    absl::WriterMutexLock state(&rewind_mu_);
    if (!Replicating() || !initialized_ || !View().Failed(self)) {
      return absl::FailedPreconditionError(absl::StrCat("server ", self, " has not stepped down: nothing to rejoin"));
    }
    joined = AwaitCopies(ServerView());
  }
  spdlog::warn("server {} stepped down and joins the job again: its {} keys are to be copied from the servers that "
               "serve them (servers {})",
               self, table_->size(), joined.DebugString());
  if (table_->size() == 0) NoteCopied(0);  // nothing to wait for
  return absl::OkStatus();
}

ServerView ParameterServerImpl::AwaitCopies(const ServerView& learned) {
  copied_ = std::make_unique<std::atomic<bool>[]>(table_->size());
  for (size_t i = 0; i < table_->size(); ++i) copied_[i] = false;
  keys_to_copy_ = static_cast<int64_t>(table_->size());
  {
    absl::MutexLock lock(&rows_copy_mu_);
    rows_to_copy_.clear();
    if (!table_->map().layout().tables.empty()) rows_to_copy_ = replicas_->PrimariesHeldBy(options_.server_id);
  }
  live_marked_ = false;
  return view_.Edit([&](ServerView& v) {
    v.Merge(learned);
    v.MarkJoining(options_.server_id);
  });
}

std::vector<std::string> ParameterServerImpl::Peers() const {
  absl::MutexLock lock(&peers_mu_);
  return moved_.Apply(peers_);
}

void ParameterServerImpl::NoteMoved(absl::string_view text) {
  // Most calls carry what this server knows already: no Peers() copy for them.
  if (!Replicating() || text == moved_.Text()) return;
  const std::vector<std::string> before = Peers();
  const std::optional<std::vector<int>> changed = moved_.Merge(text);
  if (!changed.has_value() || changed->empty()) return;
  for (int s : *changed) {
    const std::optional<std::string> address = moved_.AddressOf(s);
    if (s == options_.server_id || s >= options_.job.num_servers || !address.has_value()) continue;
    if (s < static_cast<int>(before.size()) && before[s] == *address) continue;  // joined where it was
    spdlog::warn("server {} learns that server {} joins at a new address, {}: it sends it updates there",
                 options_.server_id, s, *address);
    if (options_.replica_link != nullptr) options_.replica_link->Readdress(s, *address);
  }
}

void ParameterServerImpl::NoteOwnAddress(const std::string& address) {
  const int self = options_.server_id;
  // Its joining generation: the one it has, or, live already (nothing to
  // copy), the one before.
  uint32_t generation = View().generation(self);
  if (generation % 3 == 0 && generation > 0) --generation;
  if (moved_.Note(self, generation, address)) {
    spdlog::info("server {} joins at {}; its peers and the workers learn it with its joining", self, address);
  } else if (moved_.AddressOf(self) != address) {
    spdlog::warn("server {} joins, but its address {} cannot be passed on (generation {}): peers and workers keep "
                 "the one they have",
                 self, address, generation);
  }
}

void ParameterServerImpl::CopyAllTo(int joiner) {
  int64_t queued = 0;
  {
    absl::ReaderMutexLock state(&rewind_mu_);
    for (size_t i = 0; i < table_->size(); ++i) {
      KeyState& k = table_->key(i);
      absl::MutexLock lock(&k.mu);
      if (NextCopy(k) != joiner || !CheckServing(k).ok()) continue;
      QueueReplica(k);
      ++queued;
    }
  }
  spdlog::info("server {}: copying {} keys to server {}, which joins", options_.server_id, queued, joiner);
  CopyAllRowsTo(joiner);
  FlushReplicas();
}

void ParameterServerImpl::CopyAllRowsTo(int joiner) {
  if (!initialized_ || table_->map().layout().tables.empty()) return;
  constexpr size_t kPieceRows = 64 << 10;
  absl::ReaderMutexLock state(&rewind_mu_);
  const ServerView view = View();
  for (int primary : replicas_->PrimariesHeldBy(options_.server_id)) {
    SparseStore* store = RowStoreOf(primary);
    const int to = replicas_->NextCopy(primary, options_.server_id, view);
    if (store == nullptr || replicas_->Serving(primary, view) != options_.server_id || to < 0 ||
        (joiner >= 0 && to != joiner)) {
      continue;
    }
    int64_t rows = 0;
    store->CopyAll(kPieceRows, [&](RowsReplica r) {
      rows += static_cast<int64_t>(r.ids->size());
      QueueRowsReplica(std::move(r));
    });
    QueueRowsReplica(RowsReplica{primary, 0, 0, 0, std::make_shared<const std::vector<int64_t>>(),
                                 std::make_shared<const std::vector<float>>(), {}, /*copy_done=*/true});
    spdlog::info("server {}: copying the {} rows of server {} to server {}{}", options_.server_id, rows, primary, to,
                 joiner >= 0 ? ", which joins" : " after the rewind");
  }
}

void ParameterServerImpl::CopyRowsToBackups() {
  CopyAllRowsTo(-1);
  FlushReplicas();
}

void ParameterServerImpl::NoteRowsCopied(int primary) {
  {
    absl::MutexLock lock(&rows_copy_mu_);
    rows_recopy_due_.erase(primary);  // after a rewind
    auto it = std::find(rows_to_copy_.begin(), rows_to_copy_.end(), primary);
    if (it == rows_to_copy_.end()) return;
    rows_to_copy_.erase(it);
  }
  spdlog::info("server {} has a copy of the rows of server {}", options_.server_id, primary);
  MaybeLive();
}

void ParameterServerImpl::NoteCopied(size_t index) {
  if (index < table_->size() && copied_[index].exchange(true)) return;
  if (index < table_->size() && keys_to_copy_.fetch_sub(1) != 1) return;
  MaybeLive();
}

void ParameterServerImpl::MaybeLive() {
  if (keys_to_copy_.load() > 0) return;
  {
    absl::MutexLock lock(&rows_copy_mu_);
    if (!rows_to_copy_.empty()) return;
  }
  if (live_marked_.exchange(true)) return;
  const ServerView now = view_.Edit([&](ServerView& v) { v.MarkLive(options_.server_id); });
  const auto [low, high] = table_->VersionRange();
  checkpointer_.Attach(table_.get(), low, timeline_, /*write_now=*/false);
  spdlog::warn("server {} has a copy of every key it holds ({} keys at versions {}..{}): live again (servers {})",
               options_.server_id, table_->size(), low, high, now.DebugString());
}

}  // namespace shardps
