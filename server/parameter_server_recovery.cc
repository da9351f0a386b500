// ParameterServerImpl: start-up (options, checkpoint directory, restore),
// rewinds, housekeeping, checkpoints on demand and shutdown. See
// parameter_server_impl.h.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/replica_map.h"
#include "server/parameter_server_impl.h"
#include "server/payload_validation.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

// The optimizer's options with the job's updates per step (server/optimizer.h).
OptimizerOptions PerUpdate(const ServerOptions& o) {
  OptimizerOptions opt = o.optimizer;
  opt.pushes_per_step = PushesPerStep(o);
  opt.lookahead_updates = LookaheadUpdates(o);
  return opt;
}

absl::Status ValidateOptions(const ServerOptions& o) {
  const JobView& j = o.job;
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (j.num_servers < 1) return bad("num_servers is ", j.num_servers, "; want >= 1");
  if (j.num_workers < 1) return bad("num_workers is ", j.num_workers, "; want >= 1");
  if (o.server_id < 0 || o.server_id >= j.num_servers) {
    return bad("server_id is ", o.server_id, "; want 0..", j.num_servers - 1);
  }
  if (j.staleness < 0) return bad("staleness is ", j.staleness, "; want >= 0");
  if (j.partition_bytes < 4 || j.partition_bytes % 4 != 0) {
    return bad("partition_bytes is ", j.partition_bytes, "; want a positive multiple of 4");
  }
  if (o.worker_timeout <= absl::ZeroDuration()) return bad("worker_timeout must be positive");
  if (o.checkpoint_every_steps < 0) return bad("checkpoint_every_steps must be >= 0");
  if (!o.checkpoint_dir.empty() && j.mode != Mode::kAsync && o.checkpoints_to_keep < 2) {
    return bad("checkpoints_to_keep is ", o.checkpoints_to_keep, "; a sync or ssp job keeps at least 2 (a rewind needs "
               "a step every server still holds, and a crash may come while they write the next)");
  }
  if (o.row_admit_count < 0) return bad("row_admit_count is ", o.row_admit_count, "; want >= 0");
  if (o.row_ttl_steps < 0) return bad("row_ttl_steps is ", o.row_ttl_steps, "; want >= 0 (0: keep every row)");
  if (absl::StatusOr<ReplicaMap> replicas = ReplicaMap::Build(j.num_servers, j.replicas); !replicas.ok()) {
    return replicas.status();
  }
  if (j.replicas > 2) return bad("--replicas=", j.replicas, ": at most 2 copies are supported so far");
  if (j.mode == Mode::kSync && o.momentum_lookahead > 0) {
    return bad("momentum_lookahead is ", o.momentum_lookahead, "; sync has no stale pushes to lead (want auto or none)");
  }
  return ValidateOptimizerOptions(PerUpdate(o));
}

uint64_t NewIncarnation() {
  absl::BitGen bitgen;
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(bitgen);
  return id;
}

}  // namespace

ParameterServerImpl::ParameterServerImpl(const ServerOptions& options, Clock* clock,
                                         std::unique_ptr<CheckpointStore> store)
    : options_(options),
      clock_(clock),
      incarnation_(NewIncarnation()),
      optimizer_(MakeOptimizer(PerUpdate(options))),
      membership_(options.job.num_workers, options.worker_timeout, options.pause_threshold, clock),
      sync_(options.job.num_workers, &membership_, [this](KeyState& k, const float* mean) { Apply(k, mean); }),
      checkpointer_(options, std::move(store), &membership_, clock),
      sparse_(RowStoreOptions(options.server_id)),
      clocks_(options.job.num_workers, &membership_) {
  if (options.job.replicas > 1) {
    replicas_ = *ReplicaMap::Build(options.job.num_servers, options.job.replicas);
    for (int primary : replicas_->PrimariesHeldBy(options.server_id)) {
      if (primary != options.server_id) backup_rows_[primary] = std::make_unique<SparseStore>(RowStoreOptions(primary));
    }
  }
  checkpointer_.CaptureTablesWith([this](int64_t step) { sparse_.ArmCapture(step); },
                                  [this](int64_t step) { return sparse_.CaptureAt(step); },
                                  [this] { return sparse_.MinVersion(); });
}

absl::StatusOr<RewindResult> ParameterServerImpl::Rewind(int64_t step, int64_t timeline,
                                                         const std::vector<RestartedServer>& restarted) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  if (options_.job.mode == Mode::kAsync) {
    return Refuse(absl::FailedPreconditionError("rewind refused: an async job is never rewound"));
  }
  for (const auto& [what, value] : {std::pair{"rewind step", step}, std::pair{"rewind timeline", timeline}}) {
    if (absl::Status in_range = CheckWireStep(what, value); !in_range.ok()) return Refuse(in_range);
  }
  rewinding_.fetch_add(1);
  absl::StatusOr<RewindResult> result = ApplyRewind(step, timeline, restarted);
  rewinding_.fetch_sub(1);
  // The copies of this server's rows left the timeline behind (a copy
  // keeps no checkpoint of them): it sends them again, whole.
  if (result.ok() && result->rewound && Replicating()) CopyRowsToBackups();
  return result;
}

absl::StatusOr<RewindResult> ParameterServerImpl::ApplyRewind(int64_t step, int64_t timeline,
                                                              const std::vector<RestartedServer>& restarted) {
  absl::WriterMutexLock state(&rewind_mu_);
  absl::MutexLock lock(&recovery_mu_);
  const bool names_us = std::any_of(restarted.begin(), restarted.end(), [&](const RestartedServer& r) {
    return r.server_id == options_.server_id && r.incarnation == incarnation_;
  });
  if (awaiting_rewind_ && !names_us) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat(
        "rewind refused: server ", options_.server_id, " restarted as incarnation ", absl::Hex(incarnation_),
        ", which the rewind does not name; register again and retry")));
  }
  const bool answered = std::all_of(restarted.begin(), restarted.end(), [&](const RestartedServer& r) {
    auto it = answered_restarts_.find(r.server_id);
    return it != answered_restarts_.end() && it->second == r.incarnation;
  });
  if (answered && !awaiting_rewind_) return RewindResult{false, timeline_, 0};
  if (timeline <= timeline_) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat("rewind into timeline ", timeline, " refused: server ",
                                                             options_.server_id, " is on timeline ",
                                                             timeline_.load(), "; register again and retry")));
  }
  absl::StatusOr<ShardSnapshot> shard = checkpointer_.Read(step);
  if (!shard.ok()) return Refuse(shard.status());
  if (!initialized_) {
    absl::StatusOr<KeyMap> map = KeyMap::Build(shard->layout, options_.job.num_servers, options_.job.partition_bytes);
    if (!map.ok()) return Refuse(absl::DataLossError(map.status().message()));
    if (absl::Status fits = CheckShardHolds(*map, HeldPrimaries(), *shard,
                                           absl::StrCat("checkpoint of step ", step, " in ", options_.checkpoint_dir));
        !fits.ok()) {
      return Refuse(fits);
    }
    absl::MutexLock init(&init_mu_);
    InstallKeys(*std::move(map));
  }
  const int64_t before = CurrentStep(0);
  if (absl::Status restored = table_->Restore(std::move(shard->keys), absl::StrCat("checkpoint of step ", step));
      !restored.ok()) {
    return Refuse(restored);
  }
  PinAcknowledgedAll();
  sparse_.Restore(shard->tables, step);
  EmptyRowCopies(step);
  checkpointer_.DiscardAfter(step);
  membership_.Reset(step);
  clocks_.ForgetAll();
  for (const RestartedServer& r : restarted) answered_restarts_[r.server_id] = r.incarnation;
  {
    // Updates queued and not sent yet belong to the timeline left behind.
    absl::MutexLock queued(&replicas_mu_);
    outgoing_.clear();
    outgoing_rows_.clear();
    timeline_ = timeline;
  }
  awaiting_rewind_ = false;
  checkpointer_.Attach(table_.get(), step, timeline_, /*write_now=*/false);
  const int64_t lost = std::max<int64_t>(0, before - step);
  rewinds_.fetch_add(1);
  steps_lost_total_.fetch_add(lost);
  spdlog::warn("rewound to step {} (timeline {}): {} steps lost here; every worker registers again", step,
               timeline_.load(), lost);
  const absl::Status rewound =
      absl::AbortedError(absl::StrCat("server ", options_.server_id, " rewound the job to step ", step, "; register again"));
  for (PendingPull& p : waiters_.TakeAll()) p.done(rewound);
  for (SparseStore* rows : RowStores()) rows->FailWaiting(rewound);
  return RewindResult{true, timeline_, lost};
}


void ParameterServerImpl::EmptyRowCopies(int64_t step) {
  const ServerView view = View();
  for (auto& [primary, copy] : backup_rows_) {
    if (replicas_->Serving(primary, view) == options_.server_id) {
      // Its primary failed: this copy is the only one, and no checkpoint
      // holds it. It stays as it is, ahead of the rewound step.
      spdlog::warn("server {} serves the rows of server {}, which failed, and holds no checkpoint of them: they are "
                   "not rewound to step {}",
                   options_.server_id, primary, step);
      continue;
    }
    copy->Restore({}, step);  // its primary sends it again, whole (CopyRowsToBackups)
    absl::MutexLock lock(&rows_copy_mu_);
    rows_recopy_due_.insert(primary);
  }
}

void ParameterServerImpl::Tick() {
  absl::ReaderMutexLock state(&rewind_mu_);
  if (const absl::Duration paused = membership_.NoteTick(); paused > absl::ZeroDuration()) {
    spdlog::warn("server {} did not run for {:.1f} s (stopped or starved); that time is not counted as workers' "
                 "silence",
                 options_.server_id, absl::ToDoubleSeconds(paused));
  }
  const std::vector<int> dead = membership_.ExpireSilent();
  for (int rank : dead) {
    spdlog::warn("worker {} declared dead: silent for more than {}; steps continue without it", rank,
                 absl::FormatDuration(options_.worker_timeout));
    FailPullsAwaitingPush(rank, std::numeric_limits<int64_t>::max(),
                          "the worker was declared dead (register again)");
  }
  if (!dead.empty()) {
    CompleteReadySyncSteps();
    if (initialized_) WakeReadyPulls();
  }
  for (SparseStore* rows : RowStores()) rows->Tick(clock_->Now());
  if (initialized_) FlushReplicas();
  for (PendingPull& p : waiters_.TakeExpired(clock_->Now())) {
    refused_.fetch_add(1);
    if (p.push_ack) {
      p.done(absl::DeadlineExceededError(absl::StrCat("push of step ", p.step, " on server ", options_.server_id,
                                                      ": the keys' next copy lacked the worker's earlier pushes "
                                                      "by the push's deadline")));
      continue;
    }
    p.done(absl::DeadlineExceededError(absl::StrCat("pull for step ", p.step, " by worker ", p.rank,
                                                    " not ready by its deadline on server ", options_.server_id)));
  }
  if (!shut_down_ && !awaiting_rewind_) checkpointer_.Tick(timeline_);
  LogStaleness();
}

void ParameterServerImpl::LogStaleness() {
  const int64_t every = options_.staleness_log_every;
  if (options_.job.mode == Mode::kSync || every <= 0 || !initialized_) return;
  const int64_t step = table_->VersionRange().first / std::max(1, options_.job.num_workers);
  if (step < staleness_reported_step_ + every) return;
  const StalenessHistogram::Counts now = staleness_.Read();
  const StalenessHistogram::Counts since = now.Minus(staleness_reported_);
  if (since.count > 0) {
    spdlog::info("staleness of {} pushes up to step {}: mean {:.2f}, median <= {}, 90% <= {}, 99% <= {}, largest so far {}",
                 since.count, step, static_cast<double>(since.sum) / since.count, since.Quantile(0.5),
                 since.Quantile(0.9), since.Quantile(0.99), since.max);
  }
  staleness_reported_ = now;
  staleness_reported_step_ = step;
}

void ParameterServerImpl::NoteCheckpointStep(const CheckpointStep& announced) {
  // A request thread: never waits for a rewind (Tick takes the step then).
  if (!rewind_mu_.ReaderTryLock()) return;
  if (!shut_down_ && !awaiting_rewind_ && announced.timeline == timeline_) checkpointer_.NoteAnnounced(announced.step);
  rewind_mu_.ReaderUnlock();
}

absl::StatusOr<std::string> ParameterServerImpl::CheckpointNow() {
  if (!checkpointer_.enabled()) return Refuse(absl::FailedPreconditionError("no --checkpoint_dir is configured"));
  if (!initialized_) return Refuse(absl::FailedPreconditionError("nothing to checkpoint: not initialised"));
  absl::ReaderMutexLock state(&rewind_mu_);
  return checkpointer_.WriteNow(timeline_);
}

absl::Status ParameterServerImpl::Restore() {
  if (options_.join) {
    if (checkpointer_.enabled()) spdlog::info("--join: not restoring a checkpoint; the running job's servers copy this one its keys");
    return absl::OkStatus();
  }
  absl::StatusOr<ShardSnapshot> shard = checkpointer_.ReadNewestGood();
  if (absl::IsNotFound(shard.status()) && checkpointer_.enabled()) {
    // None of this job's server count, but another's: starting fresh would
    // silently drop the trained model.
    if (const std::string other = CheckpointOfOtherServerCount(options_.checkpoint_dir, options_.job.num_servers);
        !other.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--checkpoint_dir ", options_.checkpoint_dir, " holds checkpoints of a job of another server count (", other,
          ") and none of ", options_.job.num_servers, " servers: reshard them (shardps_ckpt reshard), or give "
          "another directory to start afresh"));
    }
  }
  if (absl::IsNotFound(shard.status())) {
    if (checkpointer_.enabled()) spdlog::info("no checkpoint yet: {}; starting fresh", std::string(shard.status().message()));
    return absl::OkStatus();
  }
  if (!shard.ok()) return shard.status();
  absl::StatusOr<KeyMap> map = KeyMap::Build(shard->layout, options_.job.num_servers, options_.job.partition_bytes);
  if (!map.ok()) return absl::DataLossError(map.status().message());
  if (absl::Status fits = CheckShardHolds(*map, HeldPrimaries(), *shard,
                                         absl::StrCat("checkpoint of step ", shard->step, " in ", options_.checkpoint_dir));
      !fits.ok()) {
    return fits;
  }
  {
    absl::MutexLock lock(&init_mu_);
    InstallKeys(*std::move(map));
  }
  const int64_t step = shard->step;
  if (absl::Status restored = table_->Restore(std::move(shard->keys), absl::StrCat("checkpoint of step ", step));
      !restored.ok()) {
    return restored;
  }
  PinAcknowledgedAll();
  sparse_.Restore(shard->tables, step);
  timeline_ = shard->timeline;
  if (options_.job.mode == Mode::kAsync) {
    membership_.RestoreClocks(shard->clocks);
  } else {
    membership_.Reset(step);
    awaiting_rewind_ = true;
  }
  checkpointer_.Attach(table_.get(), step, timeline_, /*write_now=*/false);
  const auto [low, high] = table_->VersionRange();
  spdlog::info("restored step {} (timeline {}, {} keys at versions {}..{}) as incarnation {:016x}{}", step,
               timeline_.load(), table_->size(), low, high, incarnation_,
               awaiting_rewind_ ? "; waiting for the job to rewind to a step every server holds" : "");
  return absl::OkStatus();
}

void ParameterServerImpl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (options_.job.mode != Mode::kSync) {
    const StalenessHistogram::Counts all = staleness_.Read();
    spdlog::info("staleness of all {} pushes: mean {:.2f}, median <= {}, 99% <= {}, largest {}; buckets {}", all.count,
                 all.count > 0 ? static_cast<double>(all.sum) / all.count : 0.0, all.Quantile(0.5),
                 all.Quantile(0.99), all.max, all.BucketWords());
  }
  std::vector<PendingPull> waiting;
  {
    // A pull admitted before shut_down_ was set adds itself to waiters_ under
    // the reader lock: once we hold the writer lock, every such pull is there.
    absl::WriterMutexLock state(&rewind_mu_);
    waiting = waiters_.TakeAll();
  }
  for (PendingPull& p : waiting) p.done(absl::UnavailableError("server is shutting down"));
  for (SparseStore* rows : RowStores()) rows->Shutdown();
  if (!checkpointer_.enabled() || !options_.checkpoint_on_shutdown || !initialized_ || awaiting_rewind_) return;
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<std::string> path = checkpointer_.WriteNow(timeline_);
  if (!path.ok()) {
    spdlog::warn("no final checkpoint ({}); the last one is of step {}", std::string(path.status().message()),
                 checkpointer_.last_step());
  }
}


absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(const ServerOptions& options,
                                                                         Clock* clock) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  std::unique_ptr<CheckpointStore> store;
  if (!options.checkpoint_dir.empty()) {
    absl::StatusOr<std::unique_ptr<CheckpointStore>> opened = CheckpointStore::Open(
        options.checkpoint_dir, options.server_id, options.job.num_servers, options.checkpoints_to_keep);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
  }
  auto server = std::make_unique<ParameterServerImpl>(options, clock, std::move(store));
  if (absl::Status restored = server->Restore(); !restored.ok()) return restored;
  if (options.job.mode != Mode::kSync) {
    spdlog::info("stale pushes: a push is 1/{} of a step; --staleness_lr={}; the served weights lead the momentum "
                 "by {:g} updates (--momentum_lookahead)",
                 PushesPerStep(options), StalenessLrName(options.staleness_lr), LookaheadUpdates(options));
  }
  return server;
}

}  // namespace shardps
