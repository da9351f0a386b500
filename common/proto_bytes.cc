#include "common/proto_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <climits>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

using google::protobuf::internal::WireFormatLite;

using Owner = std::shared_ptr<const void>;
void NoRelease(void*) {}
void ReleaseShared(void* holder) { delete static_cast<Owner*>(holder); }

// The tag and length that open a length-delimited field.
std::string FieldHead(int number, size_t size) {
  uint8_t head[10];  // two varint32s of at most 5 bytes each
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
      WireFormatLite::MakeTag(number, WireFormatLite::WIRETYPE_LENGTH_DELIMITED), head);
  end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), end);
  return std::string(reinterpret_cast<const char*>(head), end - head);
}

}  // namespace

grpc::ByteBuffer MessageWithBytes(const google::protobuf::MessageLite& rest, const std::vector<BytesField>& fields) {
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * fields.size() + 1);
  std::string small = rest.SerializeAsString();
  for (size_t i = 0; i < fields.size(); ++i) {
    const BytesField& f = fields[i];
    if (i == 0 || fields[i - 1].number != f.number) {
      size_t size = 0;
      for (size_t j = i; j < fields.size() && fields[j].number == f.number; ++j) size += fields[j].bytes.size();
      small += FieldHead(f.number, size);
    }
    if (f.bytes.empty()) continue;
    slices.emplace_back(small);
    small.clear();
    char* data = const_cast<char*>(f.bytes.data());
    if (f.owner == nullptr) {
      slices.emplace_back(data, f.bytes.size(), &NoRelease);
    } else {
      slices.emplace_back(data, f.bytes.size(), &ReleaseShared, new Owner(f.owner));
    }
  }
  if (!small.empty() || slices.empty()) slices.emplace_back(small);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status ParseWithBytes(const grpc::ByteBuffer& buffer, const std::vector<int>& raw, const BytesSink& sink,
                            google::protobuf::MessageLite* rest) {
  const auto malformed = [rest](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("a ", rest->GetTypeName(), " that does not parse: ", what));
  };
  grpc::ByteBuffer shared(buffer);  // the reader needs a mutable buffer; this shares the slices
  grpc::ProtoBufferReader reader(&shared);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(INT_MAX);
  std::string others;
  {
    google::protobuf::io::StringOutputStream others_stream(&others);
    google::protobuf::io::CodedOutputStream out(&others_stream);
    while (const uint32_t tag = in.ReadTag()) {
      const int number = WireFormatLite::GetTagFieldNumber(tag);
      const bool delimited = WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      if (!delimited || std::find(raw.begin(), raw.end(), number) == raw.end()) {
        if (!WireFormatLite::SkipField(&in, tag, &out)) return malformed(absl::StrCat("field ", number));
        continue;
      }
      uint32_t size = 0;
      if (!in.ReadVarint32(&size)) return malformed(absl::StrCat("the length of field ", number));
      if (static_cast<int64_t>(size) > static_cast<int64_t>(buffer.Length())) {
        return malformed(absl::StrCat("field ", number, " says ", size, " bytes; the message has ", buffer.Length()));
      }
      absl::StatusOr<char*> dst = sink(number, size);
      if (!dst.ok()) return dst.status();
      if (size > 0 && !in.ReadRaw(*dst, static_cast<int>(size))) {
        return malformed(absl::StrCat("field ", number, " is cut short"));
      }
    }
    if (!in.ConsumedEntireMessage()) return malformed("a bad tag");  // ReadTag gave 0 before the end
  }
  if (!rest->ParseFromString(others)) return malformed("its small fields");
  return absl::OkStatus();
}

}  // namespace shardps
