#include "server/shard_checkpointer.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace shardps {

ShardCheckpointer::ShardCheckpointer(const ServerOptions& options, std::unique_ptr<CheckpointStore> store,
                                     Membership* membership, Clock* clock)
    : options_(options), store_(std::move(store)), membership_(membership), clock_(clock) {
  absl::MutexLock lock(&mu_);
  last_write_ = clock_->Now();
}

std::vector<int64_t> ShardCheckpointer::Steps() const { return store_ ? store_->Steps() : std::vector<int64_t>{}; }

void ShardCheckpointer::Attach(const KeyTable* table, int64_t step, int64_t timeline, bool write_now) {
  absl::MutexLock lock(&tables_mu_);
  capture_.Cancel();
  tables_target_ = StepCapture::kNone;
  pending_keys_.reset();
  table_ = table;
  last_step_ = step;
  if (enabled() && write_now) (void)Write(step, table->Capture(), timeline);
}

absl::StatusOr<std::string> ShardCheckpointer::Write(int64_t step, std::vector<KeySnapshot> keys, int64_t timeline,
                                                     std::optional<std::vector<TableSnapshot>> tables) {
  const KeyTable& table = *table_.load();
  ShardSnapshot shard;
  shard.server_id = options_.server_id;
  shard.num_servers = options_.job.num_servers;
  shard.mode = options_.job.mode;
  shard.layout = table.map().layout();
  shard.partition_bytes = options_.job.partition_bytes;
  shard.optimizer = OptimizerName(options_.optimizer.kind);
  shard.pushes_per_step = PushesPerStep(options_);
  shard.step = step;
  shard.timeline = timeline;
  shard.clocks = membership_->Clocks();
  shard.keys = std::move(keys);
  if (tables) {
    shard.tables = *std::move(tables);
  } else if (capture_tables_) {
    shard.tables = capture_tables_(step);
  }
  absl::StatusOr<std::string> path = store_->Write(shard);
  if (!path.ok()) {
    spdlog::error("checkpoint of step {} failed: {}", step, std::string(path.status().message()));
    return path.status();
  }
  last_step_ = step;
  {
    absl::MutexLock lock(&mu_);
    last_write_ = clock_->Now();
  }
  spdlog::info("checkpoint of step {} written to {}", step, *path);
  return path;
}

int64_t ShardCheckpointer::WorkerStep() {
  const int64_t slowest = membership_->MinLiveClock();
  return slowest == std::numeric_limits<int64_t>::max() ? membership_->MaxClock() : slowest;
}

void ShardCheckpointer::Tick(int64_t timeline) {
  if (!enabled() || table_.load() == nullptr) return;
  bool time_due = false;
  if (options_.checkpoint_every_interval > absl::ZeroDuration()) {
    absl::MutexLock lock(&mu_);
    time_due = clock_->Now() - last_write_ >= options_.checkpoint_every_interval;
  }
  if (options_.job.mode == Mode::kAsync) return TickByClock(time_due, timeline);
  if (time_due) AnnounceAhead();
  if (options_.job.mode == Mode::kSsp) return TickByClock(/*time_due=*/false, timeline);
  if (Keyless()) return TickSyncTables(timeline);
  absl::MutexLock lock(&tables_mu_);
  {
    // The step taken is the last one from now on, so that a request's
    // TickSync (arm_mu_ only) does not capture it again while it is written.
    absl::MutexLock arm(&arm_mu_);
    if (auto complete = capture_.TakeComplete()) {
      last_step_ = complete->first;
      pending_keys_ = std::move(complete);
    }
  }
  if (pending_keys_) {
    if (!WriteWithTables(pending_keys_->first, pending_keys_->second, timeline)) return;  // tables still coming
    pending_keys_.reset();
  }
  TickSync();
}

bool ShardCheckpointer::Announces() const {
  return enabled() && options_.checkpoint_every_interval > absl::ZeroDuration() && options_.job.mode != Mode::kAsync;
}

void ShardCheckpointer::Announce(int64_t step) {
  int64_t seen = announced_;
  while (step > seen) {
    if (!announced_.compare_exchange_weak(seen, step)) continue;
    spdlog::debug("checkpoint by time: step {} announced", step);
    absl::MutexLock lock(&mu_);
    last_write_ = clock_->Now();
    return;
  }
}

void ShardCheckpointer::AnnounceAhead() { Announce(Reached() + 2); }

int64_t ShardCheckpointer::Reached() {
  if (options_.job.mode == Mode::kSsp) return WorkerStep();
  if (Keyless()) return tables_step_();
  return table_.load()->VersionRange().second;
}

void ShardCheckpointer::NoteAnnounced(int64_t step) {
  const KeyTable* table = table_.load();
  if (!Announces() || table == nullptr || step <= last_step_ || step < announced_) return;
  if (step == announced_) {
    if (announce_done_ >= step) return;  // armed, written or given up already
  } else {
    // Servers stand within a step of each other in sync, within the bound
    // in ssp: a step further ahead (a peer's fault) would hold every later
    // checkpoint back behind a capture that never completes.
    if (step > Reached() + kAnnounceAhead + options_.job.staleness) return;
    Announce(step);
  }
  if (options_.job.mode != Mode::kSync) return;  // ssp: Tick writes it
  // Sync: armed before the push that carried it is applied, so that no key
  // passes it. Without tables only arm_mu_ is needed, never held while a
  // checkpoint is written; with tables, Tick arms it when one is.
  if (!HasTables()) return TickSync();
  if (!tables_mu_.TryLock()) return;
  if (table->size() == 0) {
    ArmTables();
  } else if (!pending_keys_) {
    TickSync();
  }
  tables_mu_.Unlock();
}

bool ShardCheckpointer::TablesAt(const std::vector<TableSnapshot>& tables, int64_t step) {
  for (const TableSnapshot& t : tables) {
    if (t.version != step) return false;
  }
  return true;
}

bool ShardCheckpointer::HasTables() const { return capture_tables_ && tables_step_ && tables_step_() >= 0; }

bool ShardCheckpointer::Keyless() const { return table_.load()->size() == 0 && HasTables(); }

bool ShardCheckpointer::WriteWithTables(int64_t step, std::vector<KeySnapshot>& keys, int64_t timeline) {
  // The keys hold `step` exactly; the tables must too. A worker pushes a
  // step's rows after its dense gradients, so the tables may still be a
  // step behind: wait for them (their capture is armed at `step`).
  if (!HasTables()) {
    (void)Write(step, std::move(keys), timeline);
    return true;
  }
  if (tables_step_() < step) return false;
  WriteSyncStep(step, std::move(keys), timeline);
  return true;
}

void ShardCheckpointer::WriteSyncStep(int64_t step, std::vector<KeySnapshot> keys, int64_t timeline) {
  std::vector<TableSnapshot> tables = capture_tables_(step);
  if (!TablesAt(tables, step)) {  // a table was past the step when its capture was armed
    spdlog::warn("checkpoint of step {} skipped: a sparse table was already past it", step);
    last_step_ = step;
    if (step == announced_) AnnounceAhead();  // the others take it; a later one all can
    return;
  }
  (void)Write(step, std::move(keys), timeline, std::move(tables));
}

void ShardCheckpointer::TickSyncTables(int64_t timeline) {
  absl::MutexLock lock(&tables_mu_);
  ArmTables();
  if (tables_target_ != StepCapture::kNone && tables_step_() >= tables_target_) {
    const int64_t step = tables_target_;
    tables_target_ = StepCapture::kNone;
    WriteSyncStep(step, {}, timeline);
  }
}

void ShardCheckpointer::ArmTables() {
  const int64_t next = NextSyncStep();
  if (next == StepCapture::kNone) return;
  // An announced step before the one armed (--checkpoint_every's) replaces
  // it while the tables can still take it; NextSyncStep gives that one again.
  const int64_t armed = tables_target_;
  const bool earlier = next == announced_ && next < armed && tables_step_() <= next;
  if (armed != StepCapture::kNone && !earlier) return;
  if (next == announced_) announce_done_ = next;
  tables_target_ = next;
  arm_tables_(next);
}

int64_t ShardCheckpointer::NextSyncStep() const {
  int64_t next = StepCapture::kNone;
  const int64_t every = options_.checkpoint_every_steps;
  if (every > 0) next = (std::max<int64_t>(last_step_, 0) / every + 1) * every;
  const int64_t announced = announced_;
  if (announced > announce_done_ && announced > last_step_) next = std::min(next, announced);
  return next;
}

void ShardCheckpointer::TickSync() {
  absl::MutexLock lock(&arm_mu_);
  // A skipped announced step is replaced by a later one (ArmSync): arm that.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int64_t next = NextSyncStep();
    if (next == StepCapture::kNone) return;
    // An announced step before the one being captured (--checkpoint_every's)
    // goes first; NextSyncStep gives that one again once it is written.
    // An incomplete one, and only while no key is past the announced step.
    const int64_t under_way = capture_.target();
    if (next == announced_ && under_way != StepCapture::kNone && next < under_way &&
        table_.load()->VersionRange().second <= next) {
      capture_.CancelIfIncomplete();
    }
    if (!capture_.Idle()) return;
    if (ArmSync(next)) {
      if (arm_tables_) arm_tables_(next);
      return;
    }
  }
}

bool ShardCheckpointer::ArmSync(int64_t step) {
  const bool announced = step == announced_;
  if (announced) announce_done_ = step;
  const KeyTable& table = *table_.load();
  if (capture_.Arm(table, step)) return true;
  spdlog::warn("checkpoint of step {} skipped: keys were already past it", step);
  last_step_ = step;
  if (announced) AnnounceAhead();  // the others take it; a later one all can
  return false;
}

void ShardCheckpointer::TickByClock(bool time_due, int64_t timeline) {
  const int64_t every = options_.checkpoint_every_steps;
  const int64_t step = WorkerStep();
  const int64_t announced = announced_;
  if (announced > announce_done_ && announced > last_step_ && step >= announced) {  // ssp, by time
    announce_done_ = announced;
    (void)Write(announced, table_.load()->Capture(), timeline);
    return;
  }
  const bool steps_due = every > 0 && step >= std::max<int64_t>(last_step_, 0) + every;
  if (!steps_due && !time_due) return;
  (void)Write(NotBelowLast(every > 0 ? step / every * every : step), table_.load()->Capture(), timeline);
}

int64_t ShardCheckpointer::NotBelowLast(int64_t step) const {
  // async and ssp label by the slowest live worker's clock, which drops when
  // a slow worker taken for dead registers again: a checkpoint of the newest
  // weights labelled below the last would sort oldest and be pruned at once.
  return std::max(step, last_step_.load());
}

absl::StatusOr<std::string> ShardCheckpointer::WriteNow(int64_t timeline) {
  const KeyTable* table = table_.load();
  if (!enabled() || table == nullptr) return absl::FailedPreconditionError("checkpoints are off or nothing to checkpoint");
  std::vector<KeySnapshot> keys = table->Capture();
  if (options_.job.mode != Mode::kSync) return Write(NotBelowLast(WorkerStep()), std::move(keys), timeline);
  if (Keyless()) return WriteTablesNow(timeline);
  for (const KeySnapshot& k : keys) {
    if (k.version != keys.front().version) return HalfWay();
  }
  const int64_t step = keys.empty() ? 0 : keys.front().version;
  if (!HasTables()) return Write(step, std::move(keys), timeline);
  // Keys and tables: every table at the keys' step too, and never while
  // Tick takes a checkpoint (CaptureAt would take the snapshots it holds).
  absl::MutexLock lock(&tables_mu_);
  if (absl::Status busy = CaptureUnderWay(); !busy.ok()) return busy;
  std::vector<TableSnapshot> tables = capture_tables_(step);
  if (!TablesAt(tables, step)) return HalfWay();
  return Write(step, std::move(keys), timeline, std::move(tables));
}

absl::StatusOr<std::string> ShardCheckpointer::WriteTablesNow(int64_t timeline) {
  // Labelled by the tables' step, as TickSyncTables does, not step 0.
  absl::MutexLock lock(&tables_mu_);
  if (absl::Status busy = CaptureUnderWay(); !busy.ok()) return busy;
  const int64_t step = tables_step_();
  std::vector<TableSnapshot> tables = capture_tables_(step);
  if (!TablesAt(tables, step)) return HalfWay();
  return Write(step, {}, timeline, std::move(tables));
}

absl::Status ShardCheckpointer::CaptureUnderWay() const {
  int64_t step = tables_target_;
  if (step == StepCapture::kNone) step = capture_.target();
  if (step == StepCapture::kNone && pending_keys_) step = pending_keys_->first;
  if (step == StepCapture::kNone) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("server ", options_.server_id, " is taking the checkpoint of step ", step,
                                             "; try again"));
}

absl::Status ShardCheckpointer::HalfWay() const {
  return absl::UnavailableError(absl::StrCat("server ", options_.server_id, " is half way through a sync step; try again"));
}

absl::StatusOr<ShardSnapshot> ShardCheckpointer::ReadNewestGood() {
  if (!enabled()) return absl::NotFoundError("checkpoints are off (no --checkpoint_dir)");
  const std::vector<int64_t> steps = store_->Steps();
  if (steps.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", store_->dir()));
  for (size_t i = steps.size(); i-- > 0;) {
    absl::StatusOr<ShardSnapshot> shard = Read(steps[i]);
    // A listed checkpoint that is gone by now (a dangling link) is damaged,
    // not absent: NOT_FOUND would start the server afresh, and its first
    // checkpoints would then prune the good ones.
    if (absl::IsNotFound(shard.status())) shard = absl::DataLossError(shard.status().message());
    if (!absl::IsDataLoss(shard.status()) || i == 0) return shard;  // the oldest damaged too: refuse to start
    const std::string aside = store_->SetAside(steps[i]);
    spdlog::error("the checkpoint of step {} does not decode ({}); set aside as {}; restoring the one of step {}",
                  steps[i], std::string(shard.status().message()), aside, steps[i - 1]);
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint in ", store_->dir()));
}

absl::StatusOr<ShardSnapshot> ShardCheckpointer::Read(std::optional<int64_t> step) const {
  if (!enabled()) return absl::NotFoundError("checkpoints are off (no --checkpoint_dir)");
  if (!step) {
    const std::vector<int64_t> steps = store_->Steps();
    if (steps.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", store_->dir()));
    step = steps.back();
  }
  absl::StatusOr<ShardSnapshot> shard = store_->Read(*step);
  if (!shard.ok()) return shard.status();
  const std::string source = absl::StrCat("checkpoint of step ", *step, " in ", store_->dir());
  auto mismatch = [&](const char* field, auto file, auto ours) {
    return absl::FailedPreconditionError(absl::StrCat(source, " has ", field, " ", file, " but this server has ", ours));
  };
  if (shard->mode != options_.job.mode) return mismatch("mode", ModeName(shard->mode), ModeName(options_.job.mode));
  if (shard->partition_bytes != options_.job.partition_bytes) {
    return mismatch("partition_bytes", shard->partition_bytes, options_.job.partition_bytes);
  }
  if (shard->optimizer != OptimizerName(options_.optimizer.kind)) {
    return mismatch("optimizer", shard->optimizer, OptimizerName(options_.optimizer.kind));
  }
  if (shard->pushes_per_step != PushesPerStep(options_)) {
    return mismatch("pushes per schedule step (workers, or --async_lr_scaling)", shard->pushes_per_step,
                    PushesPerStep(options_));
  }
  return shard;
}

void ShardCheckpointer::DiscardAfter(int64_t step) {
  capture_.Cancel();
  // The announcement belonged to the steps dropped: the workers forget it
  // as they register again, and the next timer announces afresh.
  if (announce_done_ > step) announce_done_ = step;
  if (announced_ > step) announced_ = -1;
  if (enabled()) store_->DiscardAfter(step);
}

}  // namespace shardps
