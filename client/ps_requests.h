// The requests a worker sends and the decoding of their answers, with no
// sockets: tensors are cut into the keys of the layout, and each server's
// keys, in tensor order, are grouped into requests of at most a cap of bytes
// (pushes and pulls each have theirs; a larger key goes alone). A request is the unit the
// transfer schedule orders and windows (client/transfer_queue.h), so no
// transfer holds the link for longer than one request's bytes take. Tested on
// their own (tests/ps_requests_test).
#ifndef SHARDPS_CLIENT_PS_REQUESTS_H_
#define SHARDPS_CLIENT_PS_REQUESTS_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/key_partition.h"
#include "common/replica_map.h"
#include "proto/shardps.pb.h"
#include "client/ps_client.h"
#include "client/pulled_versions.h"

namespace shardps {

// A push in the raw framing: the header, and payloads borrowed from the
// caller's tensors until the call completes.
struct RawPush {
  int server = 0;
  uint32_t first_tensor = 0;  // forward order: its place in line
  int64_t bytes = 0;          // payload bytes on the wire
  wire::PushRequest header;
  std::vector<absl::string_view> payloads;
  // bfloat16 payloads, narrowed from the caller's floats.
  std::vector<std::unique_ptr<uint16_t[]>> narrowed;
  // Payloads copied out of the caller's tensors (OwnedCopy); empty otherwise.
  std::string owned;

  // A copy that holds its payloads itself: for sending again after the
  // caller may have reused its tensors (client/failover.h).
  std::shared_ptr<RawPush> OwnedCopy() const;
};

// Pushes of one step to one server (waiting together in the push queue), as
// few requests as carry them, in their order. A request ends where the next
// push names a key it carries already (a server refuses a request that names
// a key twice); a push that owns its payloads (OwnedCopy) goes alone. The
// requests borrow what the pushes borrow, and take their bfloat16 buffers.
// `request_of` (may be null) gets, for each push, the index of the request
// that carries it: its caller's answer is that request's.
std::vector<std::shared_ptr<RawPush>> MergePushes(std::vector<std::shared_ptr<RawPush>> pushes,
                                                  std::vector<size_t>* request_of = nullptr);

// Where one pulled chunk goes.
struct PullTarget {
  ChunkInfo chunk;
  float* tensor_values = nullptr;  // the whole tensor's values.
};

// One pull request and, beside it, where its answer's chunks go.
struct PullPart {
  int server = 0;
  uint32_t first_tensor = 0;
  int64_t bytes = 0;  // payload bytes the answer carries
  std::shared_ptr<wire::PullRequest> request;
  std::vector<PullTarget> targets;
};

class RequestBuilder {
 public:
  // `map` must outlive the builder. A cap <= 0: one request per server.
  RequestBuilder(const KeyMap* map, int64_t max_request_bytes, wire::DType wire_dtype)
      : RequestBuilder(map, max_request_bytes, max_request_bytes, wire_dtype) {}
  // Pushes and pulls with caps of their own.
  RequestBuilder(const KeyMap* map, int64_t max_push_bytes, int64_t max_pull_bytes, wire::DType wire_dtype)
      : map_(map), max_push_bytes_(max_push_bytes), max_pull_bytes_(max_pull_bytes), dtype_(wire_dtype) {}

  // INVALID_ARGUMENT naming the tensor when one is not in the layout, or
  // when no tensor is given.
  // `pulled` (may be null): each chunk names the version the pull for
  // `step` answered of its key as its base_version, where one is known.
  absl::StatusOr<std::vector<std::shared_ptr<RawPush>>> Pushes(int64_t step, const std::vector<TensorIn>& tensors,
                                                               const PulledVersions* pulled = nullptr) const;
  absl::StatusOr<std::vector<PullPart>> Pulls(int64_t step, const std::vector<TensorOut>& tensors) const;
  // One Init request per server with the values of the keys it holds: its
  // own and, with `replicas` (may be null), those it backs up.
  // INVALID_ARGUMENT when `weights` does not match the layout.
  absl::StatusOr<std::vector<std::shared_ptr<wire::InitRequest>>> Inits(
      const std::vector<std::vector<float>>& weights, const ReplicaMap* replicas = nullptr) const;

 private:
  template <typename Tensor>
  absl::Status CheckTensors(const std::vector<Tensor>& tensors, const char* what) const;
  // Each server's chunks of `tensors` in tensor order, cut into requests:
  // calls add(request index, chunk, tensor) with request indices counting
  // up from 0 as requests open.
  template <typename Tensor, typename Add>
  void Group(const std::vector<Tensor>& tensors, int64_t max_request_bytes, Add add) const;

  const KeyMap* const map_;
  const int64_t max_push_bytes_;
  const int64_t max_pull_bytes_;
  const wire::DType dtype_;
};

// Writes a pull answer (a raw frame) into its targets, and, with `pulled`,
// records each chunk's version as answered for `step`. DATA_LOSS when the
// frame is malformed or its chunks are not the ones asked for.
absl::Status DecodePullAnswer(const grpc::ByteBuffer& answer, const std::vector<PullTarget>& targets,
                              wire::DType dtype, int64_t step = 0, PulledVersions* pulled = nullptr);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_PS_REQUESTS_H_
