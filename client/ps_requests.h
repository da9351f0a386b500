// The requests a worker sends and the decoding of their answers, with no
// sockets: tensors are cut into the keys of the layout and grouped into one
// request per (server, lane), where a server's lanes are its channels and
// its chunks go to them in turn. Tested on their own (tests/ps_requests_test).
#ifndef SHARDPS_CLIENT_PS_REQUESTS_H_
#define SHARDPS_CLIENT_PS_REQUESTS_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/key_partition.h"
#include "proto/shardps.pb.h"
#include "client/ps_client.h"

namespace shardps {

// A push in the raw framing: the header, and payloads borrowed from the
// caller's tensors until the call completes.
struct RawPush {
  wire::PushRequest header;
  std::vector<absl::string_view> payloads;
  // bfloat16 payloads, narrowed from the caller's floats.
  std::vector<std::unique_ptr<uint16_t[]>> narrowed;
};

// Where one pulled chunk goes.
struct PullTarget {
  ChunkInfo chunk;
  float* tensor_values = nullptr;  // the whole tensor's values.
};

// A pull request per slot and, beside it, where its answer's chunks go.
struct PullPlan {
  std::vector<std::shared_ptr<wire::PullRequest>> requests;  // null: nothing for that slot.
  std::vector<std::vector<PullTarget>> targets;
};

// Requests are indexed by slot = server * lanes + lane.
class RequestBuilder {
 public:
  // `map` must outlive the builder.
  RequestBuilder(const KeyMap* map, int lanes, wire::DType wire_dtype)
      : map_(map), lanes_(lanes < 1 ? 1 : lanes), dtype_(wire_dtype) {}

  int lanes() const { return lanes_; }
  int ServerOfSlot(size_t slot) const { return static_cast<int>(slot) / lanes_; }

  // INVALID_ARGUMENT naming the tensor when one is not in the layout, or
  // when no tensor is given.
  absl::StatusOr<std::vector<std::shared_ptr<RawPush>>> Pushes(int64_t step, const std::vector<TensorIn>& tensors) const;
  absl::StatusOr<PullPlan> Pulls(int64_t step, const std::vector<TensorOut>& tensors) const;
  // One Init request per server with the values of the keys it owns.
  // INVALID_ARGUMENT when `weights` does not match the layout.
  absl::StatusOr<std::vector<std::shared_ptr<wire::InitRequest>>> Inits(
      const std::vector<std::vector<float>>& weights) const;

  // A transfer's place in its queue: its first tensor (earlier layers first).
  template <typename Tensor>
  static int64_t Priority(const std::vector<Tensor>& tensors) {
    int64_t p = INT64_MAX;
    for (const Tensor& t : tensors) p = std::min<int64_t>(p, t.tensor);
    return p;
  }
  // Float32 bytes of the tensors that are in the layout.
  template <typename Tensor>
  int64_t Bytes(const std::vector<Tensor>& tensors) const {
    int64_t bytes = 0;
    for (const Tensor& t : tensors) {
      if (t.tensor < map_->layout().tensors.size()) bytes += map_->layout().tensors[t.tensor].NumElements() * 4;
    }
    return bytes;
  }

 private:
  template <typename Tensor>
  absl::Status CheckTensors(const std::vector<Tensor>& tensors, const char* what) const;
  size_t SlotOf(const ChunkInfo& c, std::vector<int>& seen) const {
    return static_cast<size_t>(c.server) * lanes_ + seen[c.server]++ % lanes_;
  }

  const KeyMap* const map_;
  const int lanes_;
  const wire::DType dtype_;
};

// Writes a pull answer (a raw frame) into its targets. DATA_LOSS when the
// frame is malformed or its chunks are not the ones asked for.
absl::Status DecodePullAnswer(const grpc::ByteBuffer& answer, const std::vector<PullTarget>& targets,
                              wire::DType dtype);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PS_REQUESTS_H_
