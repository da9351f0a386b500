// The trainer's view of the parameter servers. Hides keys, chunks, servers
// and gRPC: the caller pushes and pulls whole tensors of the layout.
//
// Failures (DESIGN.md, "Failures"): a server that is down, restarting or
// unreachable is waited for, with retries, up to `server_timeout`; then the
// call fails naming it. In sync and ssp mode a call can also fail with a
// rejoin status (IsRejoin): a server restarted, the job was rewound, or this
// worker was declared dead while the others went on. The caller then calls
// Register() again and continues at the step it returns.
//
// Thread-safe: pushes and pulls of different tensors may be in flight at once.
#ifndef SHARDPS_CLIENT_PS_CLIENT_H_
#define SHARDPS_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/security.h"
#include "common/tcp_congestion.h"
#include "common/trace.h"
#include "common/job_view.h"
#include "common/layout.h"
#include "proto/shardps.pb.h"

namespace shardps {

struct ClientOptions {
  // first_weights_lane where it applies: in sync.
  bool UsesFirstWeightsLane() const { return first_weights_lane && job.mode == Mode::kSync; }
  std::vector<std::string> servers;  // "host:port", index = server id.
  int rank = 0;
  JobView job;    // layout_hash is filled from `layout`.
  Layout layout;
  absl::Duration push_timeout = absl::Seconds(30);
  absl::Duration pull_timeout = absl::Seconds(120);  // sync pulls wait for the slowest worker.
  // How long a call waits for a server that does not answer (down,
  // restarting, paused, cut off) before it fails naming the server.
  absl::Duration server_timeout = absl::Minutes(5);
  // With job.replicas > 1: how long a server may be silent before its keys
  // fail over to their backup (a refused connection fails over at once).
  absl::Duration failover_timeout = absl::Seconds(3);
  absl::Duration initial_backoff = absl::Milliseconds(100);  // doubles per attempt, up to 250 ms.
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // While a call waits for a server, the worker logs which one this often.
  absl::Duration wait_log_interval = absl::Seconds(10);
  int channels_per_server = 1;
  // Bytes of pushes (and, separately, of pulls) in flight at once; the rest
  // queue, earliest layer first (client/transfer_queue.h). 0: automatic
  // (512 KB of pushes, 256 KB of fetched weights, and two requests'
  // bytes at least, so 2 MB of pushes by default: client/grpc_transfers.cc;
  // no limit on fetched weights with first_weights_lane, in sync); negative: no
  // limit.
  int64_t in_flight_bytes = 0;
  // The most bytes one request carries: a server's chunks of one transfer,
  // in tensor order, share requests up to this many bytes (a larger chunk
  // goes alone), pushes and fetched weights each their own; a partition's
  // values at least (0: one partition), half of max_message_bytes (and of
  // a positive in_flight_bytes) at most.
  // Pushes share by default (fewer calls, the same efficiency,
  // docs/performance.md); fetches do not, so the weights the next forward
  // pass waits for queue behind fewer bytes.
  int64_t push_request_bytes = kDefaultPushRequestBytes;
  int64_t fetch_request_bytes = 0;
  // While a push to a server is in flight, the step's later pushes to it
  // wait and leave together as one request, up to push_request_bytes
  // (client/transfer_queue.h): a step's requests stop multiplying with the
  // servers a layer is spread over.
  bool coalesce_pushes = true;
  // One more connection to each server, the last, for the awaits and the
  // fetches of the first 4% of the model's bytes (FirstWeightsTensors), which
  // the server lifts out of the bulk band; the later weights are then fetched
  // with no window (FetchBudget). For servers on hosts of their own: their
  // uplinks carry only answers, which the lane orders; beside the workers,
  // the unwindowed fetches would compete with pushes on the hosts' links
  // (docs/performance.md, "The first-weights lane"). Dense weights only:
  // rows of tables keep the shared connections (and share the fetches' lack
  // of a window). With channels_per_server = 1 the pushes' connection, which
  // the server lifts too, carries every other answer: use 2 or more. Sync
  // only: async and ssp ignore it (it cost them 0.008 and 0.020 at N = 16).
  bool first_weights_lane = false;
  int64_t max_message_bytes = 256 << 20;
  // The TCP congestion control of this client's connections
  // (common/tcp_congestion.h; "auto": CUBIC where it may be set; "system":
  // the machine's default).
  std::string tcp_congestion = kDefaultTcpCongestion;
  // gRPC's bandwidth-delay probe on this client's connections
  // (common/bulk_channel_args.h): off saves CPU with many servers, on moves
  // bulk tensors faster over few connections.
  bool http2_bdp_probe = true;
  // The encoding of values on the wire: float32, or bfloat16 (half the
  // bytes; gradients and pulled weights are rounded to 8 significant bits,
  // the server keeps and applies float32).
  wire::DType wire_dtype = wire::DTYPE_FLOAT32;
  // Async and ssp (sync ignores both). By default PushThenPull fetches each
  // tensor for the next step once its push is acknowledged, so it holds
  // this worker's gradient (read-your-writes). pull_with_push: the pull
  // leaves with the push and the server answers it once that push is
  // applied (PullRequest.after_own_push): read-your-writes still, no round
  // trip between the two, but the weights are read sooner, so they hold
  // fewer of the other workers' pushes (README, "Scaling": faster on busy
  // links, about a point of accuracy at N = 4).
  bool pull_with_push = false;
  // async_prefetch: it fetches every tensor as backward begins, without
  // this worker's gradients of the step: transfers hide behind compute, at one more step of staleness for
  // the worker's own gradients; ssp's bound on the others' holds as before
  // (client/async_prefetch.h).
  bool async_prefetch = false;
  // Time for backoff, heartbeats and timeouts; null: the real clock. Must
  // outlive the client.
  Clock* clock = nullptr;
  TlsFiles tls;            // no ca: plaintext (common/security.h)
  std::string auth_token;  // sent on every call when not empty
  // Where transfers are recorded (their queue wait and each server
  // request's flight); null: not traced. Must outlive the client.
  Trace* trace = nullptr;
};

// A tensor's values to push (borrowed until the call completes).
struct TensorIn {
  uint32_t tensor = 0;
  const float* values = nullptr;  // NumElements() of that tensor.
};

// Where a pulled tensor goes (borrowed until the call completes).
struct TensorOut {
  uint32_t tensor = 0;
  float* values = nullptr;
};

struct ClientStats {
  int64_t retries = 0;          // attempts after the first, over all calls.
  int64_t registrations = 0;    // Register answers received (joins and re-registrations).
  int64_t rewinds = 0;          // rewinds this worker sent to the job.
};

// ABORTED, marked as "register again and continue where Register() says".
absl::Status RejoinError(absl::string_view why);
bool IsRejoin(const absl::Status& status);
// Keeps the first error of several in `kept`: a rejoin status wins over any
// other (the trainer must line up with the job before anything else).
void KeepFirstError(absl::Status& kept, const absl::Status& status);

class PsClient {
 public:
  using Done = std::function<void(absl::Status)>;

  // Connects lazily; fails only on bad options (INVALID_ARGUMENT) or TLS
  // files that cannot be read (FAILED_PRECONDITION, naming them).
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(const ClientOptions& options);
  // Shuts down (see Shutdown()).
  virtual ~PsClient() = default;

  // Joins the job: registers with every server (waiting for each up to
  // server_timeout), lines the servers up on one step when one of them
  // restarted (sync and ssp: every server rewinds to the newest step all of
  // them hold a checkpoint of), and returns the step to continue at.
  virtual absl::StatusOr<int64_t> Register() = 0;
  // Sends every server the initial values of the keys it owns
  // (`weights[t]` for tensor t). First writer wins; `applied` (may be null)
  // says whether these values were the ones taken.
  virtual absl::Status Init(const std::vector<std::vector<float>>& weights, bool* applied = nullptr) = 0;

  // Pushes the gradients of `tensors` for `step` to every server in
  // parallel. `done` runs once, after all answered, with the first error if
  // any (a rejoin status first).
  virtual void PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) = 0;
  // Pulls `tensors` for `step` (DESIGN.md: sync waits for version `step`).
  virtual void PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) = 0;
  // Pushes `grads` for `step` and pulls `weights` for step + 1, the pull
  // holding its place in the transfer schedule from now on. In sync mode
  // the pull waits for the step's version (which needs this push) anyway;
  // in ssp mode its values are fetched once the push is acknowledged (with
  // `pull_with_push`: the server answers it once the push is applied), so
  // they hold this worker's own gradient, and `pulled` gets the push's error
  // when the push fails; async without `async_prefetch` likewise. With
  // `async_prefetch` (async, ssp), the step's first PushThenPull starts
  // pulling every tensor for step + 1 (in ssp that pull waits for the
  // staleness bound as any pull does) and each call's `pulled` gets its
  // tensors' values from that pull, which need not hold this worker's
  // gradients of `step` (client/async_prefetch.h).
  virtual void PushThenPull(int64_t step, std::vector<TensorIn> grads, std::vector<TensorOut> weights, Done pushed,
                            Done pulled) = 0;

  // Sparse tables (DESIGN.md, "Sparse tables"): for each table named, `n`
  // ids of that table (the layout's index) with a row of its dim each,
  // borrowed until `done`. Repeated ids are pushed once, their gradients
  // summed, and each server gets one request with every table's ids it
  // holds (sync: every server and every table, with no ids where none is
  // held, so that the step completes there). Requests split past
  // max_message_bytes, between tables; a single table's part over it is
  // refused in sync (RESOURCE_EXHAUSTED) and split in async and ssp.
  template <typename Value>
  struct Rows {
    uint32_t table = 0;
    const int64_t* ids = nullptr;
    size_t n = 0;
    Value* values = nullptr;  // n * dim: gradients to push, or room for pulled rows
  };
  virtual void PushRowsManyAsync(int64_t step, std::vector<Rows<const float>> tables, Done done) = 0;
  // Pulls the rows of each table's ids for `step` into values[i * dim] (a
  // repeated id's row wherever it appears), waiting as PullAsync does.
  virtual void PullRowsManyAsync(int64_t step, std::vector<Rows<float>> tables, Done done) = 0;
  // One table's.
  void PushRowsAsync(int64_t step, uint32_t table, const int64_t* ids, size_t n, const float* grads, Done done) {
    PushRowsManyAsync(step, {{table, ids, n, grads}}, std::move(done));
  }
  void PullRowsAsync(int64_t step, uint32_t table, const int64_t* ids, size_t n, float* rows, Done done) {
    PullRowsManyAsync(step, {{table, ids, n, rows}}, std::move(done));
  }

  // Finishes or cancels every call in flight and runs each callback exactly
  // once (cancelled calls get CANCELLED); later calls fail CANCELLED at
  // once. Idempotent; blocks until every callback has run.
  virtual void Shutdown() = 0;

  virtual ClientStats Stats() const = 0;

  // Blocking forms.
  absl::Status Push(int64_t step, std::vector<TensorIn> tensors);
  absl::Status Pull(int64_t step, std::vector<TensorOut> tensors);
  absl::Status PushRows(int64_t step, uint32_t table, const int64_t* ids, size_t n, const float* grads);
  absl::Status PullRows(int64_t step, uint32_t table, const int64_t* ids, size_t n, float* rows);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PS_CLIENT_H_
