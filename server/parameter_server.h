// The transport-free parameter-server core: keys, versions, aggregation,
// optimizer, membership and checkpoints of one server's shard.
//
// The gRPC service (server/ps_service.h) turns protos into calls on this
// interface; tests drive it in-process. Every method is thread-safe.
// Consistency follows DESIGN.md: in sync mode a key's version is the step it
// has reached and a pull waits for the version it names; in async mode every
// push is applied at once; in ssp mode pulls wait for the slowest live worker
// to be within `staleness` steps.
#ifndef SHARDPS_SERVER_PARAMETER_SERVER_H_
#define SHARDPS_SERVER_PARAMETER_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_view.h"
#include "common/key_partition.h"
#include "common/layout.h"
#include "proto/shardps.pb.h"
#include "server/payload_blocks.h"
#include "server/server_options.h"

namespace shardps {

// A chunk as it arrives: the payload is borrowed from the request, in one or
// more pieces that together hold its bytes in order (server/payload_blocks.h).
struct ChunkPayload {
  ChunkKey key;
  wire::DType dtype = wire::DTYPE_FLOAT32;
  PayloadPieces pieces;
};

struct PulledChunk {
  ChunkKey key;
  int64_t version = 0;
  // The key's weights at `version`, shared with the server (never written
  // while referenced: see server/key_state.h).
  std::shared_ptr<const std::vector<float>> weights;
};

struct Registration {
  uint64_t session_id = 0;
  int64_t current_step = 0;
  absl::Duration heartbeat_interval;  // how often an idle worker should call.
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
  int64_t refused = 0;
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t steps_completed_short = 0;  // sync steps completed without a dead worker.
  double apply_seconds = 0;
  int64_t checkpoint_step = -1;
};

class ParameterServer {
 public:
  using PullDone = std::function<void(absl::StatusOr<std::vector<PulledChunk>>)>;

  // Restores the shard from options.checkpoint_dir when a checkpoint is there.
  // `clock` must outlive the server. INVALID_ARGUMENT on bad options;
  // DATA_LOSS or FAILED_PRECONDITION on an unreadable or foreign checkpoint.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(const ServerOptions& options,
                                                                 Clock* clock);
  virtual ~ParameterServer() = default;

  // Checks the worker's view of the job; FAILED_PRECONDITION names the first
  // field that differs. INVALID_ARGUMENT for a rank out of range.
  virtual absl::StatusOr<Registration> Register(int rank, const JobView& view) = 0;

  // First writer wins. `chunks` must be exactly this server's keys.
  virtual absl::StatusOr<wire::InitOutcome> Init(uint64_t session, const Layout& layout,
                                                 const std::vector<ChunkPayload>& chunks) = 0;

  // Validates every chunk, then applies or buffers each. One outcome per chunk.
  virtual absl::StatusOr<std::vector<wire::PushOutcome>> Push(
      uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) = 0;

  // Calls `done` exactly once, on this thread when the pull is ready now or
  // has an error, otherwise later on the thread that makes it ready or on the
  // housekeeping thread at `deadline` (DEADLINE_EXCEEDED) or at Shutdown()
  // (UNAVAILABLE). `answer` is the encoding the transport sends the weights
  // in (float32 or bfloat16), for the pulled-bytes count.
  virtual void Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer,
                    absl::Time deadline, PullDone done) = 0;

  // Returns the current step.
  virtual absl::StatusOr<int64_t> Heartbeat(uint64_t session) = 0;

  // Declares silent workers dead (completing sync steps that waited only for
  // them), expires overdue pulls, and writes time-based checkpoints. Called
  // by the housekeeping thread; tests with a ManualClock call it directly.
  virtual void Tick() = 0;

  // Writes a checkpoint now; returns its path. FAILED_PRECONDITION without a
  // checkpoint_dir or before Init.
  virtual absl::StatusOr<std::string> CheckpointNow() = 0;

  virtual ServerStats Stats() = 0;
  virtual int server_id() const = 0;
  virtual Mode mode() const = 0;

  // Counts and logs a request the transport refused before it reached the
  // core (a malformed frame, an unknown pull encoding, ...), as the core
  // does its own refusals; returns `status`.
  virtual absl::Status RecordRefused(absl::Status status) = 0;

  // Fails all waiting pulls with UNAVAILABLE and refuses new pushes and
  // pulls; writes a final checkpoint when configured. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PARAMETER_SERVER_H_
