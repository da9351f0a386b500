// ParameterServerImpl: pushes and pulls of sparse tables' rows, admitted as
// the dense ones are (session, initialised, not awaiting a rewind) and
// counted in the same totals, and their replication (--replicas > 1): a
// server keeps a store of its own rows and one of each server it backs up;
// after each update (a sync step, an async or ssp push) it forwards the rows
// touched, with their slots, to their next copy, and pulls wait for the
// copy's acknowledgement, as they do for keys (parameter_server_replication.cc).
// Once a primary has failed, workers send its rows to its backup, naming it
// (RowsPart.primary). A joining server is sent whole copies
// (parameter_server_join.cc). The tables themselves are server/sparse/.
#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"
#include "server/payload_validation.h"
#include "spdlog/spdlog.h"

namespace shardps {

SparseStoreOptions ParameterServerImpl::RowStoreOptions(int primary) {
  const ServerOptions& o = options_;
  SparseStoreOptions s;
  s.mode = o.job.mode;
  s.staleness = o.job.staleness;
  s.num_workers = o.job.num_workers;
  s.server_id = primary;
  s.num_servers = o.job.num_servers;
  s.row_ttl_steps = o.row_ttl_steps;
  s.row_admit_count = o.row_admit_count;
  s.max_answer_bytes = o.max_message_bytes;
  s.async_lr_scaling = o.async_lr_scaling;
  Membership* membership = &membership_;
  s.required_for_step = [membership](int64_t step) { return membership->RequiredForStep(step); };
  s.min_live_clock = [membership] { return membership->MinLiveClock(); };
  if (o.job.replicas > 1 && o.replica_link != nullptr) {
    s.on_step_applied = [this](RowsReplica rows) { QueueRowsReplica(std::move(rows)); };
    // As GateCopy says for keys: sync waits for a joining copy too.
    const bool with_joining = o.job.mode == Mode::kSync;
    s.pulls_wait_for_copy = [this, primary, with_joining] {
      return replicas_->NextCopy(primary, options_.server_id, View(), with_joining) >= 0;
    };
  }
  return s;
}

SparseStore* ParameterServerImpl::RowStoreOf(int primary) {
  if (primary == options_.server_id) return &sparse_;
  auto it = backup_rows_.find(primary);
  return it == backup_rows_.end() ? nullptr : it->second.get();
}

std::vector<SparseStore*> ParameterServerImpl::RowStores() {
  std::vector<SparseStore*> out{&sparse_};
  for (auto& [primary, store] : backup_rows_) out.push_back(store.get());
  return out;
}

absl::StatusOr<SparseStore*> ParameterServerImpl::RowStoreFor(const std::vector<SparseStore::Part>& parts) {
  const int self = options_.server_id;
  const int primary = parts.empty() ? self : parts[0].primary.value_or(self);
  for (const SparseStore::Part& p : parts) {
    if (p.primary.value_or(self) != primary) {
      return absl::InvalidArgumentError("the parts of a request of rows name different primaries");
    }
  }
  SparseStore* store = RowStoreOf(primary);
  if (store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("server ", self, " holds no copy of the rows of server ", primary));
  }
  if (!Replicating()) return store;
  const ServerView view = View();
  const int serving = replicas_->Serving(primary, view);
  if (serving != self) {
    return absl::UnavailableError(absl::StrCat("server ", self, " does not serve the rows of server ", primary,
                                               " now; server ", serving, " does (servers ", view.DebugString(), ")"));
  }
  if (primary != self) {
    absl::MutexLock lock(&rows_copy_mu_);
    if (rows_recopy_due_.count(primary) > 0) {
      return absl::DataLossError(absl::StrCat("the rows of server ", primary, " are lost: it failed after the job's "
                                              "rewind and before its rows, sent again, reached server ", self));
    }
  }
  return store;
}

absl::StatusOr<SparseStore*> ParameterServerImpl::ApplyPushRows(uint64_t session, int64_t step,
                                                               const std::vector<SparseStore::Part>& parts,
                                                               const RowPayload& grads,
                                                               std::vector<wire::PushOutcome>* outcomes,
                                                               int* rank_out) {
  absl::StatusOr<int> rank = AdmitTraffic(session, "push of rows");
  if (!rank.ok()) return rank.status();
  if (rank_out != nullptr) *rank_out = *rank;
  if (absl::Status in_range = CheckWireStep("push step", step); !in_range.ok()) return Refuse(in_range);
  absl::StatusOr<SparseStore*> store = RowStoreFor(parts);
  if (!store.ok()) return Refuse(store.status());
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::vector<wire::PushOutcome>> pushed = (*store)->PushParts(*rank, step, parts, grads);
  if (!pushed.ok()) return Refuse(pushed.status());
  const bool applied = std::any_of(pushed->begin(), pushed->end(),
                                   [](wire::PushOutcome o) { return o != wire::PUSH_DUPLICATE; });
  if (options_.job.mode != Mode::kSync && ServedKeys() == 0 && applied) {
    // A server of rows and no dense keys: a worker's push of rows for a
    // step finishes that step here (its clock, for ssp and checkpoints).
    membership_.AdvanceClock(*rank, step + 1);
    sparse_.WakeReady();
  }
  pushes_.fetch_add(1);
  bytes_pushed_.fetch_add(static_cast<int64_t>(grads.ids.size() + grads.rows.size()));
  apply_nanos_.fetch_add(absl::ToInt64Nanoseconds(clock_->Now() - start));
  *outcomes = *std::move(pushed);
  return store;
}

void ParameterServerImpl::PullRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                                   absl::string_view ids, absl::Time deadline, SparseStore::PartsDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "pull of rows");
  if (!rank.ok()) return done(rank.status());
  if (absl::Status in_range = CheckWireStep("pull step", step); !in_range.ok()) return done(Refuse(in_range));
  absl::StatusOr<SparseStore*> store = RowStoreFor(parts);
  if (!store.ok()) return done(Refuse(store.status()));
  pulls_.fetch_add(1);
  (*store)->PullParts(*rank, step, parts, ids, WaitDeadline(deadline),
                      [this, done = std::move(done)](absl::StatusOr<std::vector<PulledRows>> rows) {
                        if (!rows.ok()) return done(Refuse(rows.status()));
                        for (const PulledRows& r : *rows) {
                          bytes_pulled_.fetch_add(static_cast<int64_t>(r.rows.size() * sizeof(float)));
                        }
                        done(std::move(rows));
                      });
}

void ParameterServerImpl::QueueRowsReplica(RowsReplica rows) {
  if (shut_down_) return;
  if (replicas_->Serving(rows.primary, View()) != options_.server_id) return;
  absl::MutexLock lock(&replicas_mu_);
  outgoing_rows_.push_back(std::move(rows));
}

void ParameterServerImpl::OnRowsSent(int to, const std::vector<RowsReplica>& sent, const absl::Status& status,
                                     SentAs as) {
  if (shut_down_ || AnswerIgnored(status, as)) return;
  if (status.ok()) {
    absl::ReaderMutexLock state(&rewind_mu_);  // as OnReplicaSent
    if (as.timeline != timeline_) return;
    for (const RowsReplica& r : sent) {
      if (SparseStore* store = RowStoreOf(r.primary); store != nullptr && !r.copy_done) {
        store->NoteCopied(r.table, r.version, r.last_pushed_step);
      }
    }
    return;
  }
  // As for keys (OnReplicaSent): the copy took over, or is taken for failed
  // (NoteView then wakes the pulls that waited for it).
  OnReplicaSent(to, {}, status, as);
}

absl::Status ParameterServerImpl::ApplyRowsReplica(int from, int64_t timeline, const std::vector<RowsReplica>& rows) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  if (!TryCopyLock()) return Rewinding();
  const absl::Cleanup unlock = [this] { rewind_mu_.ReaderUnlock(); };
  if (absl::Status admitted = AdmitCopies(from, timeline, "rows"); !admitted.ok()) return admitted;
  const ServerView view = View();
  for (const RowsReplica& r : rows) {
    SparseStore* store = RowStoreOf(r.primary);
    if (store == nullptr || replicas_->Serving(r.primary, view) != from) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("server ", from, " sent rows of server ", r.primary,
                                                            ", which server ", options_.server_id,
                                                            " does not back up for it")));
    }
    if (r.copy_done) {
      NoteRowsCopied(r.primary);
      continue;
    }
    if (absl::Status steps = CheckReplicaSteps(r.version, r.last_pushed_step); !steps.ok()) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("replica rows of server ", r.primary, " from server ",
                                                            from, ": ", steps.message())));
    }
    if (absl::Status installed = store->InstallCopy(r); !installed.ok()) return Refuse(installed);
  }
  return absl::OkStatus();
}

}  // namespace shardps
