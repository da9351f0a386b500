// Protobuf messages whose large bytes fields (the rows of PushRows and
// PullRows) travel without copies. Sending, the message goes out as its
// small fields, serialised, then each large field as its tag and length and
// a slice over the caller's memory. Protobuf reads fields in any order, so
// any parser sees the whole message. Receiving, those fields' bytes go from
// the received slices straight into memory the receiver names; the small
// fields parse as usual.
#ifndef SHARDPS_COMMON_PROTO_BYTES_H_
#define SHARDPS_COMMON_PROTO_BYTES_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

// A bytes field sent from memory it does not copy.
struct BytesField {
  int number = 0;           // the field's number in the message
  absl::string_view bytes;  // under 2 GB
  // Keeps `bytes` alive until gRPC releases the slice. Null: `bytes` must
  // outlive every use gRPC makes of the buffer, which can be later than the
  // call's end (a write stuck behind a stalled peer): memory a caller lends
  // only until the call completes is not enough.
  std::shared_ptr<const void> owner;
};

// `rest` (whose own copies of these fields must be empty), then `fields`;
// neighbours with the same number are one field, their bytes in order.
grpc::ByteBuffer MessageWithBytes(const google::protobuf::MessageLite& rest, const std::vector<BytesField>& fields);

// Where `size` bytes of field `number` go: memory for exactly that many, or
// an error that refuses the message (a size that cannot be right, a field
// seen twice).
using BytesSink = std::function<absl::StatusOr<char*>(int number, size_t size)>;

// Parses `buffer`: the bytes fields numbered in `raw` go to `sink`, every
// other field into `rest`. INVALID_ARGUMENT when the buffer is not a
// message of that shape (truncated, a bad tag); the sink's own error as it
// gave it.
absl::Status ParseWithBytes(const grpc::ByteBuffer& buffer, const std::vector<int>& raw, const BytesSink& sink,
                            google::protobuf::MessageLite* rest);

}  // namespace shardps

#endif  // SHARDPS_COMMON_PROTO_BYTES_H_
