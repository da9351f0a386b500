// When a server checkpoints its shard and what a checkpoint holds; the
// files themselves are server/checkpoint_store.h's.
//
//  - sync: checkpoints hold one step exactly (server/step_capture.h), every
//    --checkpoint_every steps; so every shard has the same steps.
//  - async and ssp: versions count pushes, so a checkpoint is labelled by
//    the slowest live worker's clock, rounded down to --checkpoint_every
//    (faster workers' later pushes may be in it: at most the staleness
//    bound in ssp).
//  - Sparse tables: in sync, each table as its step completes (armed with
//    the keys' capture; a table already past the step when the capture is
//    armed is taken as it stands); in async and ssp, as they stand.
//  - After Init, a step-0 checkpoint, so every job has a step to return to.
//  - By time (--checkpoint_every_seconds), sync and ssp: servers' timers
//    differ, so the server whose timer fires announces a step two ahead of
//    where it stands (kCheckpointStepKey on its answers); workers carry the
//    newest step they heard of on every request, and every server
//    checkpoints that step. In sync no server completes the step before a
//    push carrying it arrives (some worker's push of the step before it
//    is answered after the announcement, and the capture is armed as the
//    first request carrying it arrives); a server that is past it all the
//    same (a shard with tables was writing a checkpoint) announces a later
//    one. ssp writes it once the slowest worker reaches it. Async: each by
//    its own timer, labelled by the slowest worker's clock.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_SHARD_CHECKPOINTER_H_
#define SHARDPS_SERVER_SHARD_CHECKPOINTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/checkpoint_store.h"
#include "server/key_table.h"
#include "server/membership.h"
#include "server/server_options.h"
#include "server/step_capture.h"

namespace shardps {

class ShardCheckpointer {
 public:
  // `store` is null when checkpoints are off. `membership` and `clock` must
  // outlive the checkpointer.
  ShardCheckpointer(const ServerOptions& options, std::unique_ptr<CheckpointStore> store, Membership* membership,
                    Clock* clock);

  bool enabled() const { return store_ != nullptr; }
  // Where a checkpoint's sparse tables come from (server/sparse): `arm`
  // when a sync checkpoint of a step is armed, `capture` as the checkpoint
  // of that step is written. Call before the first checkpoint; without
  // them, checkpoints hold no rows.
  // `step`: the sync step every table has completed (-1: no tables); a
  // server that holds rows but no dense keys checkpoints by it.
  using TableArm = std::function<void(int64_t step)>;
  using TableCapture = std::function<std::vector<TableSnapshot>(int64_t step)>;
  using TableStep = std::function<int64_t()>;
  void CaptureTablesWith(TableArm arm, TableCapture capture, TableStep step) {
    arm_tables_ = std::move(arm);
    capture_tables_ = std::move(capture);
    tables_step_ = std::move(step);
  }
  // Steps on disk, ascending; empty when checkpoints are off.
  std::vector<int64_t> Steps() const;
  // Step of the last checkpoint written or restored; -1 if none.
  int64_t last_step() const { return last_step_; }

  // Checkpoints `table` from now on; the job stands at `step` (after Init, a
  // restore or a rewind). With `write_now`, writes the checkpoint of `step`.
  // `table` must outlive the checkpointer.
  void Attach(const KeyTable* table, int64_t step, int64_t timeline, bool write_now);
  // Sync: call under k.mu after each applied step of key `index`.
  void OnApplied(size_t index, const KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
    capture_.OnVersion(index, k);
  }
  // Housekeeping: writes the checkpoints that are due.
  void Tick(int64_t timeline);
  // By time, sync and ssp (the file comment): a step another server
  // announced, heard through a worker or a peer. Sync arms its capture now
  // when no other is under way (else Tick does), before the push that
  // carried it is applied. Steps at or before the last checkpoint are
  // ignored.
  void NoteAnnounced(int64_t step);
  // The newest step announced here or heard of, for every answer; -1 when
  // none (always in async, and without --checkpoint_every_seconds).
  int64_t Announcement() const { return announced_; }
  // Writes a checkpoint of the shard as it is now. UNAVAILABLE in sync mode
  // while a step is half applied (keys, or a keyless shard's tables, at
  // different versions).
  absl::StatusOr<std::string> WriteNow(int64_t timeline);

  // The checkpoint of `step`, or the newest when `step` is empty (NOT_FOUND
  // when there is none), checked to come from a job configured like this
  // one (FAILED_PRECONDITION naming the field otherwise).
  absl::StatusOr<ShardSnapshot> Read(std::optional<int64_t> step) const;
  // At start: the newest checkpoint that decodes. One that does not
  // (DATA_LOSS: damaged on disk) is set aside (".damaged") and the one
  // before it tried; DATA_LOSS when the oldest does not decode either.
  absl::StatusOr<ShardSnapshot> ReadNewestGood();
  // Drops checkpoints after `step` and any capture under way (a rewind).
  void DiscardAfter(int64_t step);

 private:
  // `tables`: captured already (else captured here, by capture_tables_).
  absl::StatusOr<std::string> Write(int64_t step, std::vector<KeySnapshot> keys, int64_t timeline,
                                    std::optional<std::vector<TableSnapshot>> tables = std::nullopt);
  // WriteNow for a sync shard of rows and no dense keys.
  absl::StatusOr<std::string> WriteTablesNow(int64_t timeline) ABSL_LOCKS_EXCLUDED(tables_mu_);
  // Sync: writes the checkpoint of `step` from `keys` and the tables'
  // snapshots of it; false (nothing done) while a table is still behind
  // `step`. A table past it skips the checkpoint (logged).
  bool WriteWithTables(int64_t step, std::vector<KeySnapshot>& keys, int64_t timeline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tables_mu_);
  // Sync: the checkpoint of `step` with each table's snapshot of it;
  // skipped (logged) when a table was already past it.
  void WriteSyncStep(int64_t step, std::vector<KeySnapshot> keys, int64_t timeline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tables_mu_);
  static bool TablesAt(const std::vector<TableSnapshot>& tables, int64_t step);
  // Whether the shard holds sparse tables (CaptureTablesWith, and the layout has some).
  bool HasTables() const;
  // A shard of sparse tables and no dense keys (table_ set).
  bool Keyless() const;
  // UNAVAILABLE naming the step while Tick takes a checkpoint.
  absl::Status CaptureUnderWay() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(tables_mu_);
  absl::Status HalfWay() const;  // UNAVAILABLE: keys or tables at different steps
  // async and ssp: the slowest live worker's clock (the largest when none is live).
  int64_t WorkerStep();
  // Sync: the step the next checkpoint is of (kNone: none is due).
  int64_t NextSyncStep() const;
  // Whether checkpoints by time are announced (sync and ssp, with
  // checkpoints and an interval).
  bool Announces() const;
  // Where the shard stands: sync, the newest key version (a keyless shard's
  // tables' step); ssp, the slowest live worker's clock.
  int64_t Reached();
  // How far ahead of Reached() an announced step may be (plus the staleness).
  static constexpr int64_t kAnnounceAhead = 16;
  // Announces a step two ahead of Reached(): every server hears of it
  // before it completes it (the file comment).
  void AnnounceAhead();
  // Takes `step` as the announced one when it is newer, and restarts the
  // timer, so that one announcement serves every server's interval.
  void Announce(int64_t step);
  // Sync: arms the capture of `step`; false when a key is past it (the
  // capture is skipped, logged, and an announced step replaced by a later one).
  bool ArmSync(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(arm_mu_);
  // Arms the next sync checkpoint's capture when none is under way (an
  // announced step also when a later one is). Takes arm_mu_.
  void TickSync() ABSL_LOCKS_EXCLUDED(arm_mu_);
  // A keyless sync shard: arms its tables' capture of the next checkpoint.
  void ArmTables() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tables_mu_);
  // TickSync for a shard of rows and no dense keys: by the tables' step.
  void TickSyncTables(int64_t timeline);
  // async and ssp: `step`, or the last step written when it is below it.
  int64_t NotBelowLast(int64_t step) const;
  void TickByClock(bool time_due, int64_t timeline);

  const ServerOptions options_;
  const std::unique_ptr<CheckpointStore> store_;
  Membership* const membership_;
  Clock* const clock_;
  StepCapture capture_;
  TableArm arm_tables_;
  TableCapture capture_tables_;
  TableStep tables_step_;
  std::atomic<int64_t> tables_target_{StepCapture::kNone};  // keyless sync shard: the step armed
  // One capture of tables at a time (Tick, WriteNow, Attach).
  mutable absl::Mutex tables_mu_;
  // Arming the keys' capture (Tick, and a request that carries an announced
  // step); after tables_mu_ when both are held. Never held while writing.
  absl::Mutex arm_mu_;
  // Sync with keys and tables: the keys' snapshot of a step whose tables
  // have not all reached it yet (Tick writes it once they have).
  std::optional<std::pair<int64_t, std::vector<KeySnapshot>>> pending_keys_ ABSL_GUARDED_BY(tables_mu_);
  std::atomic<const KeyTable*> table_{nullptr};
  std::atomic<int64_t> last_step_{-1};
  absl::Mutex mu_;
  absl::Time last_write_ ABSL_GUARDED_BY(mu_);
  // By time: the newest step announced (-1: none), and the newest of those
  // this server has armed, written or given up (-1: none).
  std::atomic<int64_t> announced_{-1};
  std::atomic<int64_t> announce_done_{-1};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SHARD_CHECKPOINTER_H_
