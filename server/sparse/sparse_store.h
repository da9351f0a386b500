// The sparse tables of one server and their consistency (DESIGN.md,
// "Sparse tables"): the dense contract applied per table.
//  - sync: every live worker pushes each table once per step (with no ids
//    when it touched none here). When all required workers have pushed step
//    t, their gradients are summed in rank order, divided by the number of
//    pushes, applied once, and the table's version becomes t + 1; a pull of
//    step t waits for version t.
//  - async: each push is applied at once as 1/N of a step (N workers): the
//    learning rate and AdaGrad's accumulation scaled by 1/N, as for dense
//    keys (row_optimizer.h); pulls never wait.
//  - ssp: pushes as async; a pull at clock c waits until the slowest live
//    worker's clock is at least c - staleness (the dense clocks; a server
//    with no dense keys counts a worker's step by its push of rows).
// Bad input (unknown table, ids outside the vocabulary or not held here, a
// row count that disagrees with the payload, NaN or Inf) is refused before
// any row changes.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_SPARSE_SPARSE_STORE_H_
#define SHARDPS_SERVER_SPARSE_SPARSE_STORE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/async_lr_scaling.h"
#include "absl/time/time.h"
#include "common/job_view.h"
#include "common/table_spec.h"
#include "proto/shardps.pb.h"
#include "server/sparse/rows_replica.h"
#include "server/sparse/sparse_table.h"

namespace shardps {

// Rows as they come off the wire: `ids` int64 little-endian, `rows` values
// of `dtype` (float32 or bfloat16), row after row.
struct RowPayload {
  absl::string_view ids;
  absl::string_view rows;
  wire::DType dtype = wire::DTYPE_FLOAT32;
  // When set (float32 only), the vector `rows` views, which the store may
  // take instead of copying it (the service reads the rows into it).
  std::vector<float>* owned_rows = nullptr;
};

struct PulledRows {
  int64_t version = 0;
  std::vector<float> rows;  // ids.size() * dim
};

struct SparseTableStats {
  std::string name;
  int64_t rows = 0, bytes = 0, rows_created = 0, rows_evicted = 0, ids_waiting = 0;
  int64_t pushes = 0, pulls = 0, rows_pushed = 0, rows_pulled = 0;
  int64_t version = 0;
  // Pulls by rows asked for: bucket b counts sizes in [4^b, 4^(b+1)), b < 11;
  // bucket 0 also counts empty pulls.
  std::vector<int64_t> pull_size_buckets;
};

struct SparseStoreOptions {
  Mode mode = Mode::kSync;
  int staleness = 0;
  int num_workers = 1;
  int server_id = 0;
  int num_servers = 1;
  // Rows untouched (not read, created or updated) for this many steps are
  // dropped at Tick(); 0 keeps every row.
  int64_t row_ttl_steps = 0;
  // A row is stored at its id's row_admit_count-th push (SparseTable); 0 or
  // 1: at its first touch.
  int row_admit_count = 0;
  // A pull whose answer would be larger than this even in bfloat16 is
  // refused before any row is read (RESOURCE_EXHAUSTED); 0: no bound. A
  // pull's ids are 8 bytes, its rows dim x 2 or 4 each: without it, one
  // request of 256 MB of ids could make a server read 32M rows.
  int64_t max_answer_bytes = 0;
  // async and ssp: whether a push is 1/num_workers of a step or a whole one
  // (server/server_options.h; kAuto: per table, by its row optimizer).
  AsyncLrScaling async_lr_scaling = AsyncLrScaling::kWorkers;
  // Ranks that must push a sync step (Membership::RequiredForStep).
  std::function<std::vector<bool>(int64_t step)> required_for_step;
  // The slowest live worker's clock (Membership::MinLiveClock), for ssp.
  std::function<int64_t()> min_live_clock;
  // Replication (--replicas > 1): the rows an update touched, as it left
  // them (sync: a step's, as it completes; async and ssp: each push's, in
  // the order they are applied), called with the table's lock held: it may
  // only queue them. And whether pulls wait for the next copy to have
  // acknowledged (NoteCopied) the table's version: sync the version read;
  // async and ssp the version when the pull arrived. With it, an async or
  // ssp push of a step its rank has pushed already is a duplicate.
  std::function<void(RowsReplica)> on_step_applied;
  std::function<bool()> pulls_wait_for_copy;
};

class SparseStore {
 public:
  using RowsDone = std::function<void(absl::StatusOr<PulledRows>)>;

  explicit SparseStore(SparseStoreOptions options);
  ~SparseStore();

  // Makes the tables of the layout (once; later calls change nothing).
  void Install(const std::vector<TableSpec>& tables);
  size_t num_tables() const;

  absl::StatusOr<wire::PushOutcome> Push(int rank, int64_t step, uint32_t table, const RowPayload& grads);
  // Calls `done` once: now when ready or on a bad request, else on the
  // thread that makes it ready, at Tick() past `deadline`
  // (DEADLINE_EXCEEDED) or at Shutdown() (UNAVAILABLE).
  void Pull(int rank, int64_t step, uint32_t table, absl::string_view ids, absl::Time deadline, RowsDone done);

  // Requests that carry several tables (server/sparse/sparse_store_parts.cc):
  // part i has n ids (and rows) after those of the parts before it.
  struct Part {
    uint32_t table = 0;
    uint64_t n = 0;
    std::optional<int> primary;  // RowsPart.primary: whose rows (unset: the receiver's own)
  };
  using PartsDone = std::function<void(absl::StatusOr<std::vector<PulledRows>>)>;
  // Every part is decoded and checked before any is applied: a bad part
  // (or sizes that do not add up) applies none. One outcome per part. A
  // step a table cannot take (sync: outside its window) fails the request
  // after the parts before it were taken; a retry finds those duplicates.
  absl::StatusOr<std::vector<wire::PushOutcome>> PushParts(int rank, int64_t step, const std::vector<Part>& parts,
                                                           const RowPayload& all);
  // Each part's rows, in order, once every part's pull is answered (the
  // first error instead, if any); `done` is called once, as Pull()'s.
  void PullParts(int rank, int64_t step, const std::vector<Part>& parts, absl::string_view ids, absl::Time deadline,
                 PartsDone done);

  // Completes sync steps that no longer wait for anyone (a worker died),
  // answers pulls that became ready, expires those past their deadline,
  // evicts rows past their time to live.
  void Tick(absl::Time now);
  // Answers pulls that became ready (ssp: a worker's clock moved).
  void WakeReady();
  // Replication: the next copy holds `table` at `version`, with each
  // rank's pushes up to `pushed[rank]` (sync pulls may now read it).
  void NoteCopied(uint32_t table, int64_t version, const std::vector<int64_t>& pushed = {});
  // With a copy to wait for: calls `done` once every table of `parts` may
  // answer `rank`'s push of `step` (ParameterServer::PushRows): sync, once
  // the table has version `step` and the copy has acknowledged it; async
  // and ssp, once the copy includes the rank's pushes up to step -
  // KeptPushSteps - kExtraKeptRowSteps (common/replica_map.h). Called as
  // Pull() calls it (deadline, shutdown). Reads and counts nothing.
  void AwaitCopied(int rank, int64_t step, const std::vector<Part>& parts, absl::Time deadline,
                   std::function<void(absl::Status)> done);
  // The copy's side: rows as their primary left them (as on_step_applied
  // gives them), installed whole; the table's version becomes theirs if
  // that is newer, and the pushes they include count as done (a push of
  // those steps sent again is a duplicate). INVALID_ARGUMENT for an unknown
  // table or a row size not the table's. Copies must come in the order
  // they were made.
  absl::Status InstallCopy(const RowsReplica& copy);
  // Re-replication: every row of every table, with its slots, version and
  // the ranks' steps, handed to `emit` in pieces of at most `piece_rows`
  // rows, each table's under its lock (so that no update of it is handed
  // on between its pieces and what came before).
  void CopyAll(size_t piece_rows, const std::function<void(RowsReplica)>& emit);
  void Shutdown();
  // Ends every waiting pull and acknowledgement with `status` (a rewind:
  // what they wait for belongs to the timeline left behind).
  void FailWaiting(const absl::Status& status);

  std::vector<SparseTableStats> Stats() const;
  // The smallest table version (sync: steps every table completed); -1
  // when there are no tables.
  int64_t MinVersion() const;

  // Checkpoints: every table's rows and slots now, with its version; and
  // the tables put back from a checkpoint's snapshots, one per table (only
  // the rows that hash to this server are kept). Restore() replaces every
  // row; the versions become `step` (the checkpoint's) in sync, the
  // snapshots' own in async and ssp.
  std::vector<TableSnapshot> Capture() const;
  // Sync: snapshots each table as its step `step` completes (now if it is
  // there), for CaptureAt(step); a table already past it is missed.
  void ArmCapture(int64_t step);
  // Each table's snapshot of `step` when ArmCapture caught it, else as it
  // is now (in sync a step or more ahead; in async and ssp, which never
  // arm, always as it is now).
  std::vector<TableSnapshot> CaptureAt(int64_t step);
  void Restore(const std::vector<TableSnapshot>& tables, int64_t step);

 private:
  struct TableState;
  struct WaitingPull {
    uint32_t table = 0;
    int64_t step = 0;
    std::vector<int64_t> ids;
    absl::Time deadline;
    RowsDone done;
    int64_t copy_wait = 0;  // async, ssp with a copy: the version it must have first
    bool ack_only = false;  // AwaitCopied: reads nothing
    int rank = 0;           // AwaitCopied: whose push
  };

  // A push checked and decoded, to apply.
  struct DecodedPush {
    TableState* table;
    std::vector<int64_t> ids;
    std::vector<float> rows;
  };
  absl::StatusOr<DecodedPush> DecodePush(uint32_t table, const RowPayload& grads) const;
  absl::StatusOr<wire::PushOutcome> ApplyPush(int rank, int64_t step, DecodedPush push);
  // Async and ssp with a copy: the push applied and its rows handed on, in
  // order, under the table's lock; a duplicate of a step already pushed.
  wire::PushOutcome ApplyPushForCopy(TableState& t, int rank, int64_t step, const DecodedPush& push,
                                     float lr_share);
  // The rows `ids` of `t` as on_step_applied takes them. REQUIRES: t.mu held.
  RowsReplica CopyOf(TableState& t, const int64_t* ids, size_t n) const;
  // Per rank, the last step whose push `t`'s rows include. REQUIRES: t.mu held.
  std::vector<int64_t> IncludedPushes(const TableState& t) const;
  // The parts' slices of `all`: INVALID_ARGUMENT when their sizes do not
  // add up to its ids and rows.
  absl::StatusOr<std::vector<RowPayload>> SplitParts(const std::vector<Part>& parts, const RowPayload& all) const;
  // Answers `pull` now if ready, else when it becomes so.
  void PullDecoded(WaitingPull pull);
  // Each of `pulls` as PullDecoded does; once every one is answered, `done`
  // gets their rows in order (or the first error).
  void AnswerAll(std::vector<WaitingPull> pulls, PartsDone done);
  // The parts' pulls (without their `done`), each part's ids checked.
  absl::StatusOr<std::vector<WaitingPull>> DecodePulls(int64_t step, const std::vector<Part>& parts,
                                                       absl::string_view ids, absl::Time deadline) const;

  absl::StatusOr<TableState*> TableAt(uint32_t table) const;
  // The ids of a request, checked against the table's vocabulary and this
  // server's share of the rows.
  absl::StatusOr<std::vector<int64_t>> DecodeIds(const TableState& t, absl::string_view bytes) const;
  // RESOURCE_EXHAUSTED when the pull's answer would pass max_answer_bytes.
  absl::Status CheckAnswerFits(const std::vector<Part>& parts) const;
  absl::StatusOr<std::vector<float>> DecodeRows(const TableState& t, size_t n, const RowPayload& p) const;
  absl::StatusOr<wire::PushOutcome> PushSync(TableState& t, int rank, int64_t step, std::vector<int64_t> ids,
                                             std::vector<float> grads);
  // Applies the table's pending steps, in order, while every required rank
  // has pushed the next one (pushes may have come for steps ahead); true if
  // it applied any. REQUIRES: t.mu held.
  bool CompleteReadySteps(TableState& t);
  // The same for the table's current step alone.
  bool CompleteIfReady(TableState& t);
  // The table's version past `step`, applied to rows `ids` (and captured
  // and replicated when asked).
  void FinishStep(TableState& t, int64_t step, const int64_t* ids, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.mu);
  bool Ready(const WaitingPull& pull) const;
  // Whether the next copy has acknowledged `t` at `version` (sync: the
  // version a pull reads; async and ssp: the one it found on arrival), or
  // there is no copy to wait for.
  bool CopyHas(const TableState& t, int64_t version) const;
  // Whether pulls and answers wait for a next copy now (one is live).
  bool WaitsForCopy() const { return options_.pulls_wait_for_copy && options_.pulls_wait_for_copy(); }
  // Async and ssp: whether the next copy includes `rank`'s pushes as far
  // as its push of `step` may be answered (AwaitCopied), or there is no copy.
  bool PushCopied(const TableState& t, int rank, int64_t step) const;
  static TableSnapshot Snapshot(TableState& t);
  // A request named `step`: rows it touches are touched at the largest
  // step seen.
  static void NoteStep(TableState& t, int64_t step);
  void EvictExpired();
  void Answer(WaitingPull& pull);

  const SparseStoreOptions options_;
  mutable absl::Mutex install_mu_;
  // Set once by Install; a restore empties each state in place (never replaces it).
  std::vector<std::unique_ptr<TableState>> tables_;

  absl::Mutex waiting_mu_;
  std::list<WaitingPull> waiting_ ABSL_GUARDED_BY(waiting_mu_);
  bool shut_down_ ABSL_GUARDED_BY(waiting_mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SPARSE_SPARSE_STORE_H_
