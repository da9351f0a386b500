#include "server/sparse/sparse_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/atomic_max.h"
#include "common/wire_dtype.h"
#include "server/sparse/table_state.h"

namespace shardps {

SparseStore::SparseStore(SparseStoreOptions options) : options_(std::move(options)) {}

SparseStore::~SparseStore() { Shutdown(); }

void SparseStore::Install(const std::vector<TableSpec>& tables) {
  absl::MutexLock lock(&install_mu_);
  if (!tables_.empty()) return;
  for (const TableSpec& spec : tables) {
    tables_.push_back(std::make_unique<TableState>(spec, options_.num_workers, options_.row_admit_count));
    tables_.back()->index = static_cast<uint32_t>(tables_.size() - 1);
  }
}

size_t SparseStore::num_tables() const {
  absl::MutexLock lock(&install_mu_);
  return tables_.size();
}

absl::StatusOr<SparseStore::TableState*> SparseStore::TableAt(uint32_t table) const {
  absl::MutexLock lock(&install_mu_);
  if (table >= tables_.size()) {
    return absl::NotFoundError(
        absl::StrCat("unknown table ", table, ": the layout has ", tables_.size(), " sparse tables"));
  }
  return tables_[table].get();
}

absl::StatusOr<std::vector<int64_t>> SparseStore::DecodeIds(const TableState& t, absl::string_view bytes) const {
  const TableSpec& spec = t.table.spec();
  if (bytes.size() % sizeof(int64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("table '", spec.name, "': ", bytes.size(),
                                                   " bytes of ids is not a whole number of int64"));
  }
  std::vector<int64_t> ids(bytes.size() / sizeof(int64_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), bytes.size());
  for (int64_t id : ids) {
    if (spec.vocab > 0 && (id < 0 || id >= spec.vocab)) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", spec.name, "': id ", id, " is outside its vocabulary [0, ", spec.vocab, ")"));
    }
    if (options_.num_servers > 1 && RowServer(id, options_.num_servers) != options_.server_id) {
      return absl::NotFoundError(absl::StrCat("table '", spec.name, "': row ", id, " is held by server ",
                                              RowServer(id, options_.num_servers), ", not server ",
                                              options_.server_id));
    }
  }
  return ids;
}

absl::StatusOr<std::vector<float>> SparseStore::DecodeRows(const TableState& t, size_t n,
                                                          const RowPayload& p) const {
  const TableSpec& spec = t.table.spec();
  if (p.dtype != wire::DTYPE_FLOAT32 && p.dtype != wire::DTYPE_BFLOAT16) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", spec.name, "': row gradients of dtype ", p.dtype, "; want float32 or bfloat16"));
  }
  const size_t values = n * static_cast<size_t>(spec.dim);
  const size_t want = values * ValueBytes(p.dtype);
  if (p.rows.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("table '", spec.name, "': ", n, " ids of dim ", spec.dim,
                                                   " need ", want, " bytes of rows; the push has ",
                                                   p.rows.size()));
  }
  std::vector<float> rows;
  const bool take = p.dtype == wire::DTYPE_FLOAT32 && p.owned_rows != nullptr && p.owned_rows->size() == values &&
                    reinterpret_cast<const char*>(p.owned_rows->data()) == p.rows.data();
  if (take) {
    rows = std::move(*p.owned_rows);
  } else if (p.dtype == wire::DTYPE_FLOAT32) {
    rows.resize(values);
    if (values > 0) std::memcpy(rows.data(), p.rows.data(), want);
  } else {
    rows.resize(values);
    FromBfloat16(p.rows.data(), static_cast<int64_t>(values), rows.data());
  }
  for (size_t i = 0; i < values; ++i) {
    if (!std::isfinite(rows[i])) {
      return absl::InvalidArgumentError(absl::StrCat("table '", spec.name, "': the gradient of row ",
                                                     i / spec.dim, " (id at that place) is not finite"));
    }
  }
  return rows;
}

absl::StatusOr<wire::PushOutcome> SparseStore::Push(int rank, int64_t step, uint32_t table,
                                                    const RowPayload& grads) {
  absl::StatusOr<DecodedPush> push = DecodePush(table, grads);
  if (!push.ok()) return push.status();
  return ApplyPush(rank, step, *std::move(push));
}

absl::StatusOr<SparseStore::DecodedPush> SparseStore::DecodePush(uint32_t table, const RowPayload& grads) const {
  absl::StatusOr<TableState*> t = TableAt(table);
  if (!t.ok()) return t.status();
  absl::StatusOr<std::vector<int64_t>> ids = DecodeIds(**t, grads.ids);
  if (!ids.ok()) return ids.status();
  absl::StatusOr<std::vector<float>> rows = DecodeRows(**t, ids->size(), grads);
  if (!rows.ok()) return rows.status();
  return DecodedPush{*t, *std::move(ids), *std::move(rows)};
}

absl::StatusOr<wire::PushOutcome> SparseStore::ApplyPush(int rank, int64_t step, DecodedPush push) {
  TableState& state = *push.table;
  // Sync notes the step once its window takes it (PushSync): a refused step
  // must not age every row. Async and ssp take a worker's step as it comes.
  if (options_.mode != Mode::kSync) NoteStep(state, step);
  state.pushes.fetch_add(1, std::memory_order_relaxed);
  state.rows_pushed.fetch_add(static_cast<int64_t>(push.ids.size()), std::memory_order_relaxed);
  if (options_.mode == Mode::kSync) return PushSync(state, rank, step, std::move(push.ids), std::move(push.rows));
  // A push is 1/N of a step (the learning rate and AdaGrad's sums scaled
  // by it, as for dense keys) or a whole one (--async_lr_scaling; auto:
  // whole for AdaGrad, per element or per row, which is scale-free: a row
  // one worker touched in a step then moves as sync moves it).
  const RowOptimizerKind kind = state.table.spec().optimizer;
  const bool adagrad = kind == RowOptimizerKind::kAdagrad || kind == RowOptimizerKind::kRowwiseAdagrad;
  const bool per_push = ResolveAsyncLrScaling(options_.async_lr_scaling, adagrad) == AsyncLrScaling::kWorkers;
  const float lr_share = per_push ? 1.0f / static_cast<float>(options_.num_workers) : 1.0f;
  // A peer's repeated id counts once toward admission and takes one
  // optimizer step, as in a sync step's sum.
  MergeRepeatedIds(push.ids, push.rows, static_cast<size_t>(state.table.dim()));
  if (options_.on_step_applied) return ApplyPushForCopy(state, rank, step, push, lr_share);
  state.table.Apply(push.ids.data(), push.ids.size(), push.rows.data(), 1.0f, lr_share);
  state.version.fetch_add(1);
  return wire::PUSH_APPLIED;
}

wire::PushOutcome SparseStore::ApplyPushForCopy(TableState& t, int rank, int64_t step, const DecodedPush& push,
                                                float lr_share) {
  {
    absl::MutexLock lock(&t.mu);
    if (step <= t.last_pushed[rank]) return wire::PUSH_DUPLICATE;
    t.table.Apply(push.ids.data(), push.ids.size(), push.rows.data(), 1.0f, lr_share);
    t.version.fetch_add(1);
    t.last_pushed[rank] = step;
    options_.on_step_applied(CopyOf(t, push.ids.data(), push.ids.size()));
  }
  return wire::PUSH_APPLIED;
}

absl::StatusOr<wire::PushOutcome> SparseStore::PushSync(TableState& t, int rank, int64_t step,
                                                        std::vector<int64_t> ids, std::vector<float> grads) {
  bool completed = false;
  {
    absl::MutexLock lock(&t.mu);
    const int64_t version = t.version.load();
    if (step < version && step <= t.last_pushed[rank]) return wire::PUSH_DUPLICATE;
    if (step < version || step > version + kSyncStepsAhead) {
      return absl::FailedPreconditionError(absl::StrCat("table '", t.table.spec().name, "': push for step ", step,
                                                        ", but the table is at step ", version, " (a push may name it or ",
                                                        kSyncStepsAhead, " steps after it)"));
    }
    NoteStep(t, step);
    std::vector<std::optional<TableState::RowGrads>>& slots = t.pending[step];
    if (slots.empty()) slots.resize(static_cast<size_t>(t.num_workers));
    if (slots[static_cast<size_t>(rank)].has_value()) return wire::PUSH_DUPLICATE;
    slots[static_cast<size_t>(rank)] = TableState::RowGrads{std::move(ids), std::move(grads)};
    t.last_pushed[rank] = std::max(t.last_pushed[rank], step);
    completed = CompleteReadySteps(t);
  }
  if (completed) WakeReady();
  return completed ? wire::PUSH_APPLIED : wire::PUSH_BUFFERED;
}

bool SparseStore::CompleteReadySteps(TableState& t) {
  bool any = false;
  while (CompleteIfReady(t)) any = true;
  return any;
}

bool SparseStore::CompleteIfReady(TableState& t) {
  const int64_t step = t.version.load();
  auto at_step = t.pending.find(step);
  if (at_step == t.pending.end()) return false;
  std::vector<std::optional<TableState::RowGrads>>& pending = at_step->second;
  const std::vector<bool> required = options_.required_for_step(step);
  int pushed = 0;
  for (size_t r = 0; r < pending.size(); ++r) {
    if (pending[r].has_value()) {
      ++pushed;
    } else if (r < required.size() && required[r]) {
      return false;
    }
  }
  if (pushed == 0) return false;
  const float scale = 1.0f / static_cast<float>(pushed);
  if (pushed == 1) {
    // One push (one worker, or the others gone): its rows as they came,
    // when its ids are distinct (ascending, as a worker's plan sends them).
    TableState::RowGrads& only = **std::find_if(pending.begin(), pending.end(), [](auto& g) { return g.has_value(); });
    if (DistinctAscending(only.ids)) {
      t.table.Apply(only.ids.data(), only.ids.size(), only.grads.data(), scale);
      FinishStep(t, step, only.ids.data(), only.ids.size());
      t.pending.erase(at_step);
      return true;
    }
  }
  // Sum in rank order, so that a step's result does not depend on arrival.
  std::vector<IdRows> parts;
  for (auto& g : pending) {
    if (g.has_value()) parts.push_back({&g->ids, &g->grads});
  }
  std::vector<int64_t> ids;
  std::vector<float> sums;
  SumRowsById(parts, static_cast<size_t>(t.table.dim()), ids, sums);
  t.pending.erase(at_step);
  t.table.Apply(ids.data(), ids.size(), sums.data(), scale);
  FinishStep(t, step, ids.data(), ids.size());
  return true;
}

void SparseStore::FinishStep(TableState& t, int64_t step, const int64_t* ids, size_t n) {
  t.version.store(step + 1);
  if (t.capture_at == step + 1) {
    t.captured = Snapshot(t);
    t.capture_at = -1;
  }
  if (options_.on_step_applied) options_.on_step_applied(CopyOf(t, ids, n));
}

bool SparseStore::Ready(const WaitingPull& pull) const {
  const TableState& t = *tables_[pull.table];
  switch (options_.mode) {
    case Mode::kSync: {
      // With a copy to wait for: no pull reads a version it lacks; a push's
      // acknowledgement waits for the steps before its own.
      const int64_t version = t.version.load();
      return version >= pull.step && CopyHas(t, pull.ack_only ? pull.step : version);
    }
    case Mode::kSsp:
    case Mode::kAsync:
      if (pull.ack_only) return PushCopied(t, pull.rank, pull.step);
      if (options_.mode == Mode::kSsp && options_.min_live_clock() < pull.step - options_.staleness) return false;
      return CopyHas(t, pull.copy_wait);
  }
  return true;
}

void SparseStore::Answer(WaitingPull& pull) {
  TableState& t = *tables_[pull.table];
  PulledRows out;
  out.version = t.version.load();
  if (pull.ack_only) return pull.done(std::move(out));
  // Noted when answered, not when asked: a pull at a step the table never
  // reaches (sync waits for it) must not age every row.
  NoteStep(t, pull.step);
  out.rows.resize(pull.ids.size() * static_cast<size_t>(t.table.dim()));
  t.table.Read(pull.ids.data(), pull.ids.size(), out.rows.data());
  t.pulls.fetch_add(1, std::memory_order_relaxed);
  t.rows_pulled.fetch_add(static_cast<int64_t>(pull.ids.size()), std::memory_order_relaxed);
  t.pull_sizes[PullSizeBucket(pull.ids.size())].fetch_add(1, std::memory_order_relaxed);
  pull.done(std::move(out));
}

void SparseStore::Pull(int rank, int64_t step, uint32_t table, absl::string_view id_bytes, absl::Time deadline,
                       RowsDone done) {
  (void)rank;
  absl::StatusOr<TableState*> t = TableAt(table);
  if (!t.ok()) return done(t.status());
  if (absl::Status fits = CheckAnswerFits({Part{table, id_bytes.size() / sizeof(int64_t)}}); !fits.ok()) {
    return done(fits);
  }
  absl::StatusOr<std::vector<int64_t>> ids = DecodeIds(**t, id_bytes);
  if (!ids.ok()) return done(ids.status());
  PullDecoded(WaitingPull{table, step, *std::move(ids), deadline, std::move(done)});
}

void SparseStore::PullDecoded(WaitingPull pull) {
  pull.copy_wait = tables_[pull.table]->version.load();
  {
    absl::MutexLock lock(&waiting_mu_);
    if (shut_down_) return pull.done(absl::UnavailableError("server is shutting down"));
    if (!Ready(pull)) {
      waiting_.push_back(std::move(pull));
      return;
    }
  }
  Answer(pull);
}

void SparseStore::WakeReady() {
  std::vector<WaitingPull> ready;
  {
    absl::MutexLock lock(&waiting_mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (Ready(*it)) {
        ready.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (WaitingPull& p : ready) Answer(p);
}

void SparseStore::NoteStep(TableState& t, int64_t step) {
  const int64_t seen = RaiseTo(t.step_seen, step, std::memory_order_relaxed);
  t.table.TouchAt(std::max(seen, step));
}

void SparseStore::EvictExpired() {
  const int64_t ttl = options_.row_ttl_steps;
  if (ttl <= 0) return;
  absl::MutexLock lock(&install_mu_);
  for (auto& t : tables_) {
    const int64_t now = t->step_seen.load();
    // A sweep visits every row: at most every ttl/4 steps.
    if (now - t->swept_at.load() < std::max<int64_t>(1, ttl / 4) || now <= ttl) continue;
    t->swept_at = now;
    t->table.Evict(now - ttl);
  }
}

void SparseStore::Tick(absl::Time now) {
  if (options_.mode == Mode::kSync) {
    absl::MutexLock lock(&install_mu_);
    for (auto& t : tables_) {
      absl::MutexLock table_lock(&t->mu);
      CompleteReadySteps(*t);
    }
  }
  EvictExpired();
  WakeReady();
  std::vector<WaitingPull> expired;
  {
    absl::MutexLock lock(&waiting_mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->deadline <= now) {
        expired.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (WaitingPull& p : expired) {
    const char* what = p.ack_only ? "the answer to a push of table " : "pull of table ";
    const char* waited = p.ack_only ? " waited past its deadline for the table's next copy" : " waited past its deadline";
    p.done(absl::DeadlineExceededError(absl::StrCat(what, p.table, " rows for step ", p.step, waited)));
  }
}

void SparseStore::Shutdown() {
  {
    absl::MutexLock lock(&waiting_mu_);
    shut_down_ = true;  // no pull waits from here on
  }
  FailWaiting(absl::UnavailableError("server is shutting down"));
}

void SparseStore::FailWaiting(const absl::Status& status) {
  std::list<WaitingPull> left;
  {
    absl::MutexLock lock(&waiting_mu_);
    left.swap(waiting_);
  }
  for (WaitingPull& p : left) p.done(status);
}

std::vector<SparseTableStats> SparseStore::Stats() const {
  std::vector<SparseTableStats> out;
  absl::MutexLock lock(&install_mu_);
  for (const auto& t : tables_) {
    SparseTableStats s;
    s.name = t->table.spec().name;
    s.rows = t->table.rows();
    s.bytes = t->table.bytes();
    s.rows_created = t->table.rows_created();
    s.rows_evicted = t->table.rows_evicted();
    s.ids_waiting = t->table.ids_waiting();
    s.pushes = t->pushes.load();
    s.pulls = t->pulls.load();
    s.rows_pushed = t->rows_pushed.load();
    s.rows_pulled = t->rows_pulled.load();
    s.version = t->version.load();
    for (const auto& b : t->pull_sizes) s.pull_size_buckets.push_back(b.load());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace shardps
