// Private to server/: the ParameterServer core's implementation, declared
// once and defined in several files: parameter_server.cc (the requests
// workers send), parameter_server_acks.cc (when a push is acknowledged),
// parameter_server_rows.cc (sparse tables' rows), parameter_server_recovery.cc
// (start-up restore, rewinds, housekeeping, checkpoints and shutdown),
// parameter_server_replication.cc and parameter_server_join.cc (copies on a
// second server), parameter_server_stats.cc. Callers use parameter_server.h.
#ifndef SHARDPS_SERVER_PARAMETER_SERVER_IMPL_H_
#define SHARDPS_SERVER_PARAMETER_SERVER_IMPL_H_

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/moved_servers.h"
#include "common/replica_map.h"
#include "common/shared_server_view.h"
#include "server/key_table.h"
#include "server/membership.h"
#include "server/optimizer.h"
#include "server/parameter_server.h"
#include "server/pull_waiters.h"
#include "server/shard_checkpointer.h"
#include "server/staleness_histogram.h"
#include "server/sync_aggregator.h"
#include "server/worker_clocks.h"

namespace shardps {

class ParameterServerImpl final : public ParameterServer {
 public:
  ParameterServerImpl(const ServerOptions& options, Clock* clock, std::unique_ptr<CheckpointStore> store);
  ~ParameterServerImpl() override { Shutdown(); }

  // Restores the newest checkpoint, if any (at start).
  absl::Status Restore();

  absl::StatusOr<Registration> Register(int rank, const JobView& view, std::optional<Resume> resume) override;
  absl::StatusOr<wire::InitOutcome> Init(uint64_t session, const Layout& layout,
                                         const std::vector<ChunkPayload>& chunks) override;
  absl::StatusOr<std::vector<wire::PushOutcome>> Push(
      uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) override;
  void Push(uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks, absl::Time deadline,
            PushDone done) override;
  void Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer, bool after_own_push,
            absl::Time deadline, PullDone done) override;
  void PullRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts, absl::string_view ids,
                absl::Time deadline, SparseStore::PartsDone done) override;
  void PushRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts, const RowPayload& grads,
                absl::Time deadline, PushDone done) override;
  absl::StatusOr<int64_t> Heartbeat(uint64_t session) override;
  absl::StatusOr<RewindResult> Rewind(int64_t step, int64_t timeline, const std::vector<RestartedServer>& restarted) override;
  // Rewind's work under the rewind lock; `rewound` false when it was done
  // already (another worker's rewind of the same restart).
  absl::StatusOr<RewindResult> ApplyRewind(int64_t step, int64_t timeline, const std::vector<RestartedServer>& restarted);
  // In a rewind: empties this server's copies of other servers' rows, each
  // then due again from its primary (rows_recopy_due_), but those it serves.
  void EmptyRowCopies(int64_t step);
  void Tick() override;
  absl::StatusOr<std::string> CheckpointNow() override;
  ServerStats Stats() override;
  int server_id() const override { return options_.server_id; }
  Mode mode() const override { return options_.job.mode; }
  uint64_t incarnation() const override { return incarnation_; }
  absl::Status RecordRefused(absl::Status status) override { return Refuse(std::move(status)); }
  void NotePeers(const std::vector<std::string>& addresses) override;
  void NoteView(const ServerView& view) override;
  ServerView View() const override { return view_.Load(); }
  void NoteCheckpointStep(const CheckpointStep& announced) override;
  std::optional<CheckpointStep> AnnouncedCheckpointStep() const override {
    const int64_t step = checkpointer_.Announcement();
    if (step < 0) return std::nullopt;
    return CheckpointStep{timeline_, step};
  }
  JoinInfo AnswerJoin(int from) override;
  absl::Status BeginJoin(const Layout& layout, int64_t timeline, const ServerView& view) override;
  absl::Status Rejoin() override;
  std::vector<std::string> Peers() const override;
  void NoteMoved(absl::string_view text) override;
  std::string MovedText() const override { return moved_.Text(); }
  void NoteOwnAddress(const std::string& address) override;
  absl::Status ApplyReplica(int from, int64_t timeline, const std::vector<ReplicaUpdate>& updates) override;
  absl::Status ApplyRowsReplica(int from, int64_t timeline, const std::vector<RowsReplica>& rows) override;
  void Shutdown() override;

 private:
  // Counts and logs a refused request.
  absl::Status Refuse(absl::Status status);
  // The worker's rank, or why its pushes and pulls are refused now.
  absl::StatusOr<int> AdmitTraffic(uint64_t session, const char* what);
  // Builds the key table once. REQUIRES: init_mu_ held, not initialized.
  // `publish`: mark the server initialised at once; Init does it only
  // after the initial values are written.
  void InstallKeys(KeyMap map, bool publish = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(init_mu_);
  int64_t CurrentStep(int rank);
  // The deadline a request waits for on this server: the one it came with,
  // kLongestWait from now at most (server/server_options.h).
  absl::Time WaitDeadline(absl::Time asked) const { return std::min(asked, clock_->Now() + kLongestWait); }
  absl::Status ValidatePush(int rank, int64_t step, const std::vector<ChunkPayload>& chunks,
                            std::vector<KeyState*>& states);
  // Push and PushRows, under rewind_mu_ (shared), setting *rank_out to the
  // pushing worker's rank. ApplyPushRows returns the store the rows went to
  // and sets `outcomes`; the caller flushes the replicas it queued.
  absl::StatusOr<std::vector<wire::PushOutcome>> ApplyPush(uint64_t session, int64_t step,
                                                          const std::vector<ChunkPayload>& chunks,
                                                          int* rank_out = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(rewind_mu_);
  absl::StatusOr<SparseStore*> ApplyPushRows(uint64_t session, int64_t step,
                                             const std::vector<SparseStore::Part>& parts, const RowPayload& grads,
                                             std::vector<wire::PushOutcome>* outcomes, int* rank_out)
      ABSL_SHARED_LOCKS_REQUIRED(rewind_mu_);
  // With --replicas > 1 a push's answer waits for the next copy
  // (parameter_server_acks.cc): whether `ack` may go now.
  bool PushAckReady(const PendingPull& ack);
  // A waiter of waiters_ (a pull, or a push's answer) that may go now.
  bool WaiterReady(const PendingPull& p) { return p.push_ack ? PushAckReady(p) : PullReady(p); }

  // Runs the optimizer over the key with `grad` and counts a version.
  // Runs the optimizer over the key with `grad` (its learning rate times
  // `lr_scale`) and counts a version.
  void Apply(KeyState& k, const float* grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // `staleness` (-1: none, as in sync) goes to the trace.
  void Apply(KeyState& k, const ChunkPayload& grad, double lr_scale, int64_t staleness = -1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Async and ssp: the push's staleness (the key's version minus the push's
  // base version, else minus the version its worker last pulled), counted.
  int64_t CountStaleness(const KeyState& k, int rank, const ChunkPayload& grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // --staleness_lr's factor on a push's learning rate.
  double StalenessLrScale(int64_t staleness) const;
  void LogStaleness();
  absl::StatusOr<wire::PushOutcome> PushAsync(KeyState& k, int rank, int64_t step, const ChunkPayload& grad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Sync: completes the steps that no longer wait for anyone.
  void CompleteReadySyncSteps();

  bool PullReady(const PendingPull& pull);
  // Async, ssp: the pull does not wait for its own push (after_own_push
  // false), or its worker has pushed step - 1 to every key it names.
  bool OwnPushApplied(const PendingPull& pull);
  // Refuses a push of `rank` (counted and logged, as Refuse()), first failing
  // its pulls that wait for it (after_own_push).
  absl::Status RefusePush(int rank, int64_t step, const absl::Status& status);
  // Fails `rank`'s pulls (async, ssp) that still wait for its push of `step`
  // or earlier, which will not come; says `why`.
  void FailPullsAwaitingPush(int rank, int64_t step, absl::string_view why);
  void CompletePull(PendingPull pull);
  void WakeReadyPulls();
  // After a push changed keys: their updates go to the next copy, and the
  // pulls they made ready are answered.
  void AfterApplied();

  // Replication (parameter_server_replication.cc).
  bool Replicating() const { return replicas_.has_value() && replicas_->replicas() > 1; }
  // The primaries whose keys this server holds, itself first.
  std::vector<int> HeldPrimaries() const {
    return Replicating() ? replicas_->PrimariesHeldBy(options_.server_id) : std::vector<int>{options_.server_id};
  }
  // OK when this server serves `k` now; UNAVAILABLE when it stepped down,
  // is joining, or holds `k` as a backup since a failover (the worker's view
  // may be behind; the answer's brings it up to date), FAILED_PRECONDITION
  // when it holds `k` as a backup of a primary that never failed.
  absl::Status CheckServing(const KeyState& k) const;
  // The server this one forwards `k`'s updates to; -1 when none.
  int NextCopy(const KeyState& k) const;
  // The copy whose acknowledgements pulls wait for: NextCopy, except a
  // joining one in async and ssp; -1 when none.
  int GateCopy(const KeyState& k) const;
  // Whether the copy pulls wait for (GateCopy) has acknowledged version
  // `step` of k, or there is none: a sync pull of `step` waits for it, and
  // a pull in any mode reads no version past the acknowledged one.
  bool ReplicatedFor(const KeyState& k, int64_t step) const;
  // With replicas: keeps the key's weights as those its next copy holds
  // (Init, a restore and an install set the acknowledged version without an
  // acknowledgement), so that a pull before the next acknowledgement reads
  // them and not a later update under their version.
  void PinAcknowledged(KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  void PinAcknowledgedAll();
  // Queues every key this server serves whose next copy is `joiner`, whole
  // (the joiner has nothing yet), and sends them.
  void CopyAllTo(int joiner);
  // While joining: `k` (index) has been copied here; marks this server live
  // once every key has.
  void NoteCopied(size_t index);
  // BeginJoin and Rejoin: no key copied here yet; merges `learned` and marks
  // this server joining. Returns the view. REQUIRES: rewind_mu_ held
  // exclusively (ApplyReplica reads copied_ under it).
  ServerView AwaitCopies(const ServerView& learned);
  // After an update of `k` that this server serves: queues it for the next
  // copy. REQUIRES: k.mu held.
  void QueueReplica(KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Sends the queued updates through the replica link, marked with the
  // timeline they were queued on (a rewind drops what is still queued).
  void FlushReplicas();
  // How updates were sent: `standing`, this server's own generation then
  // (OwnGeneration; a failure sent under another says nothing now), and the
  // timeline (an answer to a send of a timeline left behind says nothing).
  struct SentAs {
    uint32_t standing = 0;
    int64_t timeline = 0;
  };
  void OnReplicaSent(int to, const std::vector<ReplicaUpdate>& sent, const absl::Status& status, SentAs as);
  // Whether an answer to a send `as` is to be ignored: ABORTED (the copy
  // left that timeline; this server's rewind follows) or of a timeline
  // this server has left since.
  bool AnswerIgnored(const absl::Status& status, SentAs as) const;
  uint32_t OwnGeneration();
  void InstallReplica(KeyState& k, const ReplicaUpdate& u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Whether server `from`'s copies (`what`: "updates", "rows") of its
  // `timeline` can be taken here: FAILED_PRECONDITION without --replicas > 1,
  // UNAVAILABLE before Init, OUT_OF_RANGE before this server rewinds to
  // `timeline`, ABORTED when it is on a later one. REQUIRES: rewind_mu_ held.
  absl::Status AdmitCopies(int from, int64_t timeline, const char* what);
  // A copy from a peer takes rewind_mu_ (shared) unless a rewind runs
  // (rewinding_), and is then answered Rewinding() (OUT_OF_RANGE: the link
  // tries again without counting the wait as the peer's silence), so that a
  // long rewind here does not get this server taken for failed.
  bool TryCopyLock();
  absl::Status Rewinding() const;
  int64_t UnderReplicatedKeys() const;
  // Keys this server serves whose newest version the next copy has not
  // acknowledged yet (ServerStats::keys_awaiting_copy).
  int64_t KeysAwaitingCopy() const;
  // How many keys this server serves now: a worker's ssp or async step is
  // finished here once it has pushed them all (WorkerClocks). With
  // --replicas > 1 not the keys it holds (it backs some up), and more after
  // a failover; counted again when the view changes.
  size_t ServedKeys();

  // Rows (parameter_server_rows.cc): the options of the store of `primary`'s
  // rows (this server's own, or a copy it keeps with --replicas > 1).
  SparseStoreOptions RowStoreOptions(int primary);
  // The store a request's parts name (one primary for all), if this server
  // serves those rows now: UNAVAILABLE when another does (a failover, a
  // step-down), INVALID_ARGUMENT when this server holds no copy of them.
  absl::StatusOr<SparseStore*> RowStoreFor(const std::vector<SparseStore::Part>& parts);
  // Every store of rows: this server's own first.
  std::vector<SparseStore*> RowStores();
  // The store of `primary`'s rows here; null when this server holds none.
  SparseStore* RowStoreOf(int primary);
  // Re-replication: every row this server serves whose next copy is
  // `joiner` (any next copy when `joiner` < 0), each primary's followed by
  // a copy_done marker (CopyAllTo).
  void CopyAllRowsTo(int joiner);
  // After a rewind: every row this server serves, whole, to its next copy
  // (which emptied its copy of them in its own rewind).
  void CopyRowsToBackups();
  // The rows of `primary` have all been copied here (while joining, or
  // after a rewind: rows_recopy_due_).
  void NoteRowsCopied(int primary);
  // While joining: marks this server live once every key and every
  // primary's rows have been copied here (once per join).
  void MaybeLive();
  // Queues an update's rows of `primary` for the next copy (the store's
  // on_step_applied); FlushReplicas sends them.
  void QueueRowsReplica(RowsReplica rows);
  // Sends rows queued by QueueRowsReplica (FlushReplicas).
  void FlushRows(std::vector<RowsReplica> rows, int64_t timeline);
  void OnRowsSent(int to, const std::vector<RowsReplica>& sent, const absl::Status& status, SentAs as);

  // Constant after construction.
  const ServerOptions options_;
  Clock* const clock_;
  const uint64_t incarnation_;
  const std::unique_ptr<Optimizer> optimizer_;

  Membership membership_;
  SyncAggregator sync_;
  ShardCheckpointer checkpointer_;
  PullWaiters waiters_;
  SparseStore sparse_;  // the layout's sparse tables (installed with the keys)
  // --replicas > 1: the rows of the servers this one backs up, by primary.
  std::map<int, std::unique_ptr<SparseStore>> backup_rows_;

  // Held shared by every request and tick, exclusively by a rewind, which
  // replaces every key's state and every session at once.
  absl::Mutex rewind_mu_;
  // The keys are set once, by the first Init or by Restore(), under
  // init_mu_; after initialized_ is true the table is only read.
  absl::Mutex init_mu_;
  std::atomic<bool> initialized_{false};
  std::unique_ptr<KeyTable> table_;
  // The layout hash of the job: from the first registration, then the layout.
  std::atomic<uint64_t> job_layout_hash_{0};

  // Recovery: rewinds applied (persisted in checkpoints), whether this
  // server restored a checkpoint and awaits a rewind, and the restarts
  // (server id -> incarnation) that rewinds here have answered.
  std::atomic<int64_t> timeline_{0};
  std::atomic<int> rewinding_{0};  // Rewind calls running (TryCopyLock)
  std::atomic<bool> awaiting_rewind_{false};
  absl::Mutex recovery_mu_;
  std::map<int, uint64_t> answered_restarts_ ABSL_GUARDED_BY(recovery_mu_);

  WorkerClocks clocks_;
  StalenessHistogram staleness_;
  // Per tensor of the layout; made with table_ and, like it, only read after.
  std::unique_ptr<StalenessHistogram[]> tensor_staleness_;
  // Tick's last staleness report: the counts then, and the step.
  StalenessHistogram::Counts staleness_reported_;
  int64_t staleness_reported_step_ = 0;

  // Replication: the chains (with --replicas), the job's servers as this
  // one knows them, and the updates waiting for the link.
  std::optional<ReplicaMap> replicas_;
  SharedServerView view_;
  // Joining (BeginJoin): which keys have been copied here, and how many not.
  std::unique_ptr<std::atomic<bool>[]> copied_;
  std::atomic<int64_t> keys_to_copy_{0};
  // Joining, with sparse tables: the primaries whose rows are still to come.
  absl::Mutex rows_copy_mu_;
  std::vector<int> rows_to_copy_ ABSL_GUARDED_BY(rows_copy_mu_);
  // After a rewind: the primaries whose copy of rows here was emptied and
  // whose whole copy has not arrived yet (served meanwhile: DATA_LOSS).
  std::set<int> rows_recopy_due_ ABSL_GUARDED_BY(rows_copy_mu_);
  std::atomic<bool> live_marked_{false};
  mutable absl::Mutex peers_mu_;
  std::vector<std::string> peers_ ABSL_GUARDED_BY(peers_mu_);
  MovedServers moved_{options_.job.num_servers};  // servers that joined at a new address
  absl::Mutex served_mu_;
  std::optional<ServerView> served_view_ ABSL_GUARDED_BY(served_mu_);  // the view served_keys_ was counted in
  size_t served_keys_ ABSL_GUARDED_BY(served_mu_) = 0;
  absl::Mutex replicas_mu_;
  std::vector<ReplicaUpdate> outgoing_ ABSL_GUARDED_BY(replicas_mu_);
  std::vector<RowsReplica> outgoing_rows_ ABSL_GUARDED_BY(replicas_mu_);
  absl::Mutex rows_flush_mu_;  // held from taking outgoing_rows_ until the link has them
  std::atomic<int64_t> replica_keys_sent_{0}, replica_keys_installed_{0}, replica_bytes_sent_{0};
  std::atomic<int64_t> push_acks_held_{0};

  std::atomic<bool> shut_down_{false};
  std::atomic<int64_t> pushes_{0}, pulls_{0}, heartbeats_{0}, refused_{0}, unauthenticated_{0}, bytes_pushed_{0}, bytes_pulled_{0};
  std::atomic<int64_t> apply_nanos_{0}, rewinds_{0}, steps_lost_total_{0};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PARAMETER_SERVER_IMPL_H_
