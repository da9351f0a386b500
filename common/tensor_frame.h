// The raw framing of Push and Pull (proto/shardps.proto, "The raw framing"):
// [uint32 little-endian H][H bytes of protobuf header][payloads]. Encoding
// points slices at the payloads' memory instead of copying it; decoding reads
// payloads straight from the received slices.
#ifndef SHARDPS_COMMON_TENSOR_FRAME_H_
#define SHARDPS_COMMON_TENSOR_FRAME_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

inline constexpr char kRawPushMethod[] = "/shardps.wire.RawTensors/Push";
inline constexpr char kRawPullMethod[] = "/shardps.wire.RawTensors/Pull";
inline constexpr char kRawReplicateMethod[] = "/shardps.wire.RawTensors/Replicate";

// A frame whose payload slices borrow `payloads`' memory: it must stay
// unchanged until gRPC is done with the buffer (the call has completed).
grpc::ByteBuffer EncodeFrame(const google::protobuf::MessageLite& header,
                             const std::vector<absl::string_view>& payloads);
// A payload a frame shares: `bytes` lies in memory that `owner` keeps alive.
struct SharedPayload {
  std::shared_ptr<const void> owner;
  absl::string_view bytes;
};
// Shares a float vector's memory.
SharedPayload ShareFloats(std::shared_ptr<const std::vector<float>> values);
// A frame that shares its payloads: each slice holds a reference to its
// owner until gRPC releases the slice (no copy).
grpc::ByteBuffer EncodeFrame(const google::protobuf::MessageLite& header, std::vector<SharedPayload> payloads);

// A plain protobuf message as a buffer (the push response, the pull request),
// serialised by gRPC's own protobuf serialiser.
grpc::ByteBuffer MessageBuffer(const google::protobuf::MessageLite& message);

// A received frame: parses the header, then hands out the payload in order.
class FrameReader {
 public:
  // INVALID_ARGUMENT when the buffer is shorter than its header length says
  // or the header does not parse.
  static absl::StatusOr<std::unique_ptr<FrameReader>> Parse(const grpc::ByteBuffer& buffer,
                                                            google::protobuf::MessageLite* header);
  // Payload bytes not yet read.
  int64_t remaining() const { return remaining_; }
  // The next n (<= remaining()) payload bytes as one view, aligned for
  // float32: into the received slice when they lie in one at an aligned
  // address, else copied into memory this reader owns. Views stay valid
  // while the reader lives.
  absl::string_view Next(size_t n);
  // The next n (<= remaining()) payload bytes as the pieces of the received
  // slices that hold them, in order, without copying.
  std::vector<absl::string_view> NextPieces(size_t n);
  // Copies the next n (<= remaining()) payload bytes to dst.
  void CopyNext(size_t n, char* dst);
  // Reads the next `count` bfloat16 values (2 * count <= remaining() bytes)
  // and writes them to out as float32.
  void WidenNextBfloat16(int64_t count, float* out);

 private:
  static constexpr uintptr_t kAlignment = 4;
  FrameReader() = default;
  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0, offset_ = 0;  // read position
  int64_t remaining_ = 0;
  std::vector<std::unique_ptr<char[]>> copies_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TENSOR_FRAME_H_
