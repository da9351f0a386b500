// The trainer's view of the parameter servers. Hides keys, chunks, servers
// and gRPC: the caller pushes and pulls whole tensors of the layout.
//
// Thread-safe: pushes and pulls of different tensors may be in flight at once.
#ifndef SHARDPS_WORKER_PS_CLIENT_H_
#define SHARDPS_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_view.h"
#include "common/layout.h"
#include "proto/shardps.pb.h"

namespace shardps {

struct ClientOptions {
  std::vector<std::string> servers;  // "host:port", index = server id.
  int rank = 0;
  JobView job;    // layout_hash is filled from `layout`.
  Layout layout;
  absl::Duration push_timeout = absl::Seconds(30);
  absl::Duration pull_timeout = absl::Seconds(120);  // sync pulls wait for the slowest worker.
  int max_attempts = 8;                      // per call, on UNAVAILABLE.
  absl::Duration initial_backoff = absl::Milliseconds(100);  // doubles per attempt, up to 2 s.
  absl::Duration heartbeat_interval = absl::Seconds(2);
  int channels_per_server = 1;
  // Bytes of pushes (and, separately, of pulls) in flight at once; the rest
  // queue, earliest layer first (worker/transfer_queue.h). 0: no limit.
  int64_t in_flight_bytes = 0;
  int64_t max_message_bytes = 256 << 20;
  // The encoding of values on the wire: float32, or bfloat16 (half the
  // bytes; gradients and pulled weights are rounded to 8 significant bits,
  // the server keeps and applies float32).
  wire::DType wire_dtype = wire::DTYPE_FLOAT32;
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

class PsClient {
 public:
  using Done = std::function<void(absl::Status)>;

  // Connects lazily; fails only on bad options (INVALID_ARGUMENT).
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(const ClientOptions& options);
  virtual ~PsClient() = default;

  // Registers with every server. Returns the step to continue at.
  virtual absl::StatusOr<int64_t> Register() = 0;
  // Sends every server the initial values of the keys it owns
  // (`weights[t]` for tensor t). First writer wins.
  virtual absl::Status Init(const std::vector<std::vector<float>>& weights) = 0;

  // Pushes the gradients of `tensors` for `step` to every server in
  // parallel, one request per server. `done` runs once, after all answered,
  // with the first error if any.
  virtual void PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) = 0;
  // Pulls `tensors` for `step` (DESIGN.md: sync waits for version `step`).
  virtual void PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) = 0;

  // Blocking forms.
  absl::Status Push(int64_t step, std::vector<TensorIn> tensors);
  absl::Status Pull(int64_t step, std::vector<TensorOut> tensors);
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_PS_CLIENT_H_
