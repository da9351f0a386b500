// The transport-free parameter-server core: keys, versions, aggregation,
// optimizer, membership, checkpoints and recovery of one server's shard.
//
// The gRPC service (server/ps_service.h) turns protos into calls on this
// interface; tests drive it in-process. Every method is thread-safe.
// Consistency follows DESIGN.md: in sync mode a key's version is the step it
// has reached and a pull waits for the version it names; in async mode every
// push is applied at once; in ssp mode pulls wait for the slowest live worker
// to be within `staleness` steps.
//
// Recovery (DESIGN.md, "Failures"): every start is a new incarnation. A
// server that restores a checkpoint in sync or ssp mode awaits a rewind: it
// refuses pushes and pulls (ABORTED) until a worker sends every server a
// Rewind to the newest step all of them hold a checkpoint of.
#ifndef SHARDPS_SERVER_PARAMETER_SERVER_H_
#define SHARDPS_SERVER_PARAMETER_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_view.h"
#include "common/key_partition.h"
#include "common/layout.h"
#include "common/replica_map.h"
#include "common/rpc_metadata.h"
#include "proto/shardps.pb.h"
#include "server/payload_blocks.h"
#include "server/replica_link.h"
#include "server/server_options.h"
#include "server/sparse/sparse_store.h"
#include "server/staleness_histogram.h"

namespace shardps {

struct PulledChunk {
  ChunkKey key;
  int64_t version = 0;
  // The key's weights at `version`, shared with the server (never written
  // while referenced: see server/key_state.h).
  std::shared_ptr<const std::vector<float>> weights;
};

struct Registration {
  uint64_t session_id = 0;
  int64_t current_step = 0;           // the step this worker continues at.
  absl::Duration heartbeat_interval;  // how often an idle worker should call.
  uint64_t incarnation = 0;
  int64_t timeline = 0;
  bool awaiting_rewind = false;
  bool initialized = false;
  bool trained = false;                   // some key has had an optimizer step.
  std::vector<int64_t> checkpoint_steps;  // ascending.
};

// A server that restarted: its id and the incarnation it restarted as.
struct RestartedServer {
  int server_id = 0;
  uint64_t incarnation = 0;
};

struct RewindResult {
  bool rewound = false;  // false: an earlier rewind answered these restarts.
  int64_t timeline = 0;
  int64_t steps_lost = 0;
};

struct ServerStats {
  bool initialized = false;
  int num_keys = 0;
  int64_t owned_bytes = 0;
  int64_t min_version = 0;
  int64_t max_version = 0;
  int live_workers = 0;
  int64_t dead_workers_total = 0;
  int64_t pushes = 0;
  int64_t pulls = 0;
  int64_t waiting_pulls = 0;  // dense pulls held now until their version is ready (rows not counted)
  int64_t heartbeats = 0;
  int64_t refused = 0;
  int64_t unauthenticated = 0;  // of them, calls without the job token
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t steps_completed_short = 0;  // sync steps completed without a dead worker.
  double apply_seconds = 0;
  int64_t checkpoint_step = -1;
  uint64_t incarnation = 0;
  int64_t timeline = 0;
  int64_t rewinds = 0;              // rewinds applied by this incarnation.
  int64_t steps_lost_total = 0;     // steps those rewinds went back.
  bool awaiting_rewind = false;
  std::vector<int64_t> checkpoint_steps;
  StalenessHistogram::Counts staleness;  // async and ssp pushes
  // The same per tensor (the keys of one tensor are one key range), in
  // layout order; empty before Init.
  std::vector<std::pair<std::string, StalenessHistogram::Counts>> staleness_by_tensor;
  std::vector<SparseTableStats> tables;  // in layout order; empty before Init
  // Replication: keys this server serves with fewer copies than --replicas
  // (their next copy failed or is still being filled), updates forwarded
  // and installed, bytes sent, the job's servers as this one knows them,
  // and, while this server joins, the keys it still waits to be copied.
  int64_t under_replicated_keys = 0;
  // Keys it serves whose newest version the next copy has not acknowledged
  // yet: a pull reads the acknowledged one meanwhile (async and ssp), or
  // waits for it (sync). 0 once replication has caught up.
  int64_t keys_awaiting_copy = 0;
  int64_t replica_keys_sent = 0;
  int64_t replica_keys_installed = 0;
  // With --replicas > 1: pushes whose answer waited for the backup (their
  // worker got ahead of the copy by more than the steps it keeps; a trainer
  // that pulls every step in sync never does).
  int64_t push_acks_held = 0;
  // Updates the replica link did not send: a newer one of the key went in
  // the same call.
  int64_t replica_updates_superseded = 0;
  int64_t replica_bytes_sent = 0;
  ServerView view;
  int64_t keys_to_copy = 0;
};

// What a server tells one that joins the job (ps_server --join).
struct JoinInfo {
  bool initialized = false;
  Layout layout;
  int64_t timeline = 0;
};

class ParameterServer {
 public:
  using PullDone = std::function<void(absl::StatusOr<std::vector<PulledChunk>>)>;

  // Opens options.checkpoint_dir (creating it; FAILED_PRECONDITION naming
  // the path and the OS error when it cannot be written) and restores the
  // newest checkpoint there. `clock` must outlive the server.
  // INVALID_ARGUMENT on bad options; DATA_LOSS or FAILED_PRECONDITION on an
  // unreadable or foreign checkpoint.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(const ServerOptions& options,
                                                                 Clock* clock);
  virtual ~ParameterServer() = default;

  // Where a registering worker continues: at step `step` of `timeline`.
  struct Resume {
    int64_t step = 0;
    int64_t timeline = 0;
  };
  // Checks the worker's view of the job; FAILED_PRECONDITION names the first
  // field that differs. INVALID_ARGUMENT for a rank out of range. The worker
  // continues at `resume` when given (ABORTED when this server is on another
  // timeline), else at this server's current step.
  virtual absl::StatusOr<Registration> Register(int rank, const JobView& view, std::optional<Resume> resume) = 0;

  // First writer wins. `chunks` must be exactly this server's keys.
  virtual absl::StatusOr<wire::InitOutcome> Init(uint64_t session, const Layout& layout,
                                                 const std::vector<ChunkPayload>& chunks) = 0;

  // Validates every chunk, then applies or buffers each. One outcome per
  // chunk, at once: tests drive the core with it; the services use the
  // callback form below, whose answer may wait for the backup.
  virtual absl::StatusOr<std::vector<wire::PushOutcome>> Push(
      uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) = 0;

  // Push, with its answer (what the transport acknowledges) given to `done`:
  // at once without --replicas > 1; with it, once the next copy of every
  // key pushed includes the worker's pushes up to step - KeptPushSteps
  // (common/replica_map.h; DESIGN.md, "Replication"): in sync every step
  // before `step`. A worker keeps that many steps of answered pushes to
  // send again at a failover (client/failover.h), so none it dropped is
  // needed, whether or not it pulls. `done` is called once, as Pull()'s is
  // (deadline, rewind, shutdown); `chunks` are read only until Push returns.
  using PushDone = std::function<void(absl::StatusOr<std::vector<wire::PushOutcome>>)>;
  virtual void Push(uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks, absl::Time deadline,
                    PushDone done) = 0;

  // Calls `done` exactly once, on this thread when the pull is ready now or
  // has an error, otherwise later on the thread that makes it ready or on the
  // housekeeping thread at `deadline` (DEADLINE_EXCEEDED), at a rewind
  // (ABORTED) or at Shutdown() (UNAVAILABLE). `answer` is the encoding the
  // transport sends the weights in (float32 or bfloat16), for the
  // pulled-bytes count; DTYPE_UNSPECIFIED for an await (PullRequest's
  // await_only): the transport sends no values, so nothing counts as pulled
  // or read. `after_own_push` (async, ssp; PullRequest's): the pull also
  // waits until the worker's push of step - 1 is applied to every key.
  virtual void Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer,
                    bool after_own_push, absl::Time deadline, PullDone done) = 0;

  // Sparse tables (server/sparse/sparse_store.h): one worker's row
  // gradients of `step` for one or more tables (`parts`, their ids and
  // rows back to back in `grads`), one outcome per part, answered through
  // `done` as Push's callback form is (with --replicas > 1, once the parts'
  // tables' copy allows: SparseStore::AwaitCopied); and a pull of rows by
  // id, which calls `done` once as Pull() does.
  virtual void PushRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                        const RowPayload& grads, absl::Time deadline, PushDone done) = 0;
  virtual void PullRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                        absl::string_view ids, absl::Time deadline, SparseStore::PartsDone done) = 0;

  // Returns the current step.
  virtual absl::StatusOr<int64_t> Heartbeat(uint64_t session) = 0;

  // Restores the checkpoint of `step` and enters `timeline`, unless every
  // server in `restarted` was answered by an earlier rewind (see
  // proto/shardps.proto, Rewind). FAILED_PRECONDITION when this server
  // awaits a rewind that `restarted` does not name, or is on `timeline` or
  // later already; NOT_FOUND when it has no checkpoint of `step`.
  virtual absl::StatusOr<RewindResult> Rewind(int64_t step, int64_t timeline,
                                              const std::vector<RestartedServer>& restarted) = 0;

  // Declares silent workers dead (completing sync steps that waited only for
  // them), expires overdue pulls, and writes checkpoints that are due. Called
  // by the housekeeping thread; tests with a ManualClock call it directly.
  virtual void Tick() = 0;

  // Writes a checkpoint now; returns its path. FAILED_PRECONDITION without a
  // checkpoint_dir or before Init; UNAVAILABLE in sync mode while a step is
  // half applied.
  virtual absl::StatusOr<std::string> CheckpointNow() = 0;
  // Sync and ssp with --checkpoint_every_seconds: a step another server
  // announced for a checkpoint (common/rpc_metadata.h, kCheckpointStepKey),
  // which this one takes too (server/shard_checkpointer.h, "By time"); one
  // of another timeline than this server's is ignored.
  virtual void NoteCheckpointStep(const CheckpointStep& announced) = 0;
  // The step this server announces on its answers, with its timeline; none
  // when it knows of none.
  virtual std::optional<CheckpointStep> AnnouncedCheckpointStep() const = 0;

  virtual ServerStats Stats() = 0;
  virtual int server_id() const = 0;
  virtual Mode mode() const = 0;
  virtual uint64_t incarnation() const = 0;

  // Counts and logs a request the transport refused before it reached the
  // core (a malformed frame, an unknown pull encoding, ...), as the core
  // does its own refusals; returns `status`.
  virtual absl::Status RecordRefused(absl::Status status) = 0;

  // Replication (DESIGN.md, "Replication"; common/replica_map.h). Every
  // server's address, from a worker's registration (for the replica link).
  virtual void NotePeers(const std::vector<std::string>& addresses) = 0;
  // The job's servers as a request shows them (a worker's, or a peer's):
  // merged into this server's view. A server learnt failed: this one takes
  // over the keys it backs up for it; itself failed, it steps down (refuses
  // its keys' pushes and pulls, UNAVAILABLE, and fails its waiting pulls so
  // that workers go to the backup). A server learnt joining: this one copies
  // it, whole, every key it serves that the joiner holds.
  virtual void NoteView(const ServerView& view) = 0;
  virtual ServerView View() const = 0;
  // For a server that joins (`from`): whether the job runs here, its layout
  // and timeline.
  virtual JoinInfo AnswerJoin(int from) = 0;
  // This server joins a running job (ps_server --join): builds its keys from
  // `layout` (empty), takes the timeline, merges `view` and marks itself
  // joining. It marks itself live once every key it holds has been copied
  // to it (ApplyReplica). FAILED_PRECONDITION once initialised (by workers:
  // a new job).
  virtual absl::Status BeginJoin(const Layout& layout, int64_t timeline, const ServerView& view) = 0;
  // A server that stepped down (named failed while it lived: it was paused,
  // say) joins again as BeginJoin does, keeping its keys until the copies
  // replace them. FAILED_PRECONDITION unless it is initialised and failed.
  virtual absl::Status Rejoin() = 0;
  // Every server's address, as the first worker's registration gave them
  // (empty before), with every move applied (below).
  virtual std::vector<std::string> Peers() const = 0;
  // Servers that joined at a new address (common/moved_servers.h): merges
  // the moves a request shows (before its view: NoteView then reaches a
  // joining server where it is now); a text that does not parse is ignored.
  virtual void NoteMoved(absl::string_view text) = 0;
  // The moves this server knows, for answers and peers ("" when none).
  virtual std::string MovedText() const = 0;
  // This server, joining (BeginJoin or Rejoin), listens at `address`: the
  // peers and workers learn it with its joining view.
  virtual void NoteOwnAddress(const std::string& address) = 0;
  // A primary's updated keys (ReplicaUpdate, from server `from`, queued on
  // its `timeline`): installed whole where newer than what is here.
  // FAILED_PRECONDITION when this server has taken over `from`'s keys;
  // NOT_FOUND or INVALID_ARGUMENT for a key it does not hold for `from` or
  // of the wrong size; UNAVAILABLE before Init or before this server has
  // rewound to `timeline`; ABORTED when it is on a later timeline (nothing
  // installed: the updates belong to the timeline it left).
  virtual absl::Status ApplyReplica(int from, int64_t timeline, const std::vector<ReplicaUpdate>& updates) = 0;
  // The same for rows of sparse tables (RowsReplica, sync): installed in
  // this server's copy of their primary's part.
  virtual absl::Status ApplyRowsReplica(int from, int64_t timeline, const std::vector<RowsReplica>& rows) = 0;

  // Fails all waiting pulls with UNAVAILABLE and refuses new pushes and
  // pulls; writes a final checkpoint when configured. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PARAMETER_SERVER_H_
