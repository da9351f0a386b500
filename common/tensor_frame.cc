#include "common/tensor_frame.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire_dtype.h"

namespace shardps {
namespace {

// [u32 H][H header bytes][zero padding to a multiple of 4].
grpc::Slice HeaderSlice(const google::protobuf::MessageLite& header) {
  const size_t size = header.ByteSizeLong();
  std::string bytes((4 + size + 3) / 4 * 4, '\0');
  const uint32_t h = static_cast<uint32_t>(size);
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((h >> (8 * i)) & 0xff);
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(&bytes[4]));
  return grpc::Slice(bytes);
}

void NoRelease(void*) {}
using Owner = std::shared_ptr<const void>;
void ReleaseShared(void* holder) { delete static_cast<Owner*>(holder); }

}  // namespace

grpc::ByteBuffer EncodeFrame(const google::protobuf::MessageLite& header,
                             const std::vector<absl::string_view>& payloads) {
  std::vector<grpc::Slice> slices;
  slices.reserve(payloads.size() + 1);
  slices.push_back(HeaderSlice(header));
  for (absl::string_view p : payloads) {
    if (!p.empty()) slices.emplace_back(const_cast<char*>(p.data()), p.size(), &NoRelease);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

SharedPayload ShareFloats(std::shared_ptr<const std::vector<float>> values) {
  const absl::string_view bytes(reinterpret_cast<const char*>(values->data()), values->size() * sizeof(float));
  return {std::move(values), bytes};
}

grpc::ByteBuffer EncodeFrame(const google::protobuf::MessageLite& header, std::vector<SharedPayload> payloads) {
  std::vector<grpc::Slice> slices;
  slices.reserve(payloads.size() + 1);
  slices.push_back(HeaderSlice(header));
  for (SharedPayload& p : payloads) {
    if (p.owner == nullptr || p.bytes.empty()) continue;
    auto holder = std::make_unique<Owner>(std::move(p.owner));
    slices.emplace_back(const_cast<char*>(p.bytes.data()), p.bytes.size(), &ReleaseShared, holder.release());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer MessageBuffer(const google::protobuf::MessageLite& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer;
  // Fails only for a message over 2 GB, which gRPC could not send anyway.
  grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(message, &buffer, &own_buffer);
  return buffer;
}

absl::StatusOr<std::unique_ptr<FrameReader>> FrameReader::Parse(const grpc::ByteBuffer& buffer,
                                                                google::protobuf::MessageLite* header) {
  std::unique_ptr<FrameReader> r(new FrameReader());
  if (!buffer.Dump(&r->slices_).ok()) return absl::InvalidArgumentError("frame: unreadable buffer");
  for (const grpc::Slice& s : r->slices_) r->remaining_ += s.size();
  if (r->remaining_ < 4) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", r->remaining_, " bytes has no header length"));
  }
  unsigned char length[4];
  r->CopyNext(4, reinterpret_cast<char*>(length));
  const int64_t h = length[0] | (length[1] << 8) | (length[2] << 16) | (static_cast<int64_t>(length[3]) << 24);
  if (h > r->remaining_) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header says ", h, " bytes; only ", r->remaining_, " follow"));
  }
  const absl::string_view bytes = r->Next(h);
  if (!header->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("frame header of ", h, " bytes does not parse as ",
                                                   header->GetTypeName()));
  }
  const int64_t pad = (4 - (4 + h) % 4) % 4;
  if (r->remaining_ < pad) return absl::InvalidArgumentError("frame ends inside its header padding");
  char skip[4];
  r->CopyNext(pad, skip);
  return r;
}

absl::string_view FrameReader::Next(size_t n) {
  while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
    ++slice_;
    offset_ = 0;
  }
  if (n == 0) return {};
  const char* p = slice_ < slices_.size() ? reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_ : nullptr;
  if (p != nullptr && slices_[slice_].size() - offset_ >= n && reinterpret_cast<uintptr_t>(p) % kAlignment == 0) {
    offset_ += n;
    remaining_ -= n;
    return absl::string_view(p, n);
  }
  copies_.push_back(std::unique_ptr<char[]>(new char[n]));
  CopyNext(n, copies_.back().get());
  return absl::string_view(copies_.back().get(), n);
}

void FrameReader::WidenNextBfloat16(int64_t count, float* out) {
  char split[2];  // a value whose two bytes lie in two slices
  bool half = false;
  for (absl::string_view piece : NextPieces(static_cast<size_t>(count) * 2)) {
    const char* p = piece.data();
    size_t left = piece.size();
    if (half && left > 0) {
      split[1] = *p++;
      --left;
      FromBfloat16(split, 1, out++);
      half = false;
    }
    const int64_t whole = static_cast<int64_t>(left / 2);
    FromBfloat16(p, whole, out);
    out += whole;
    if (left % 2 == 1) {
      split[0] = p[whole * 2];
      half = true;
    }
  }
}

std::vector<absl::string_view> FrameReader::NextPieces(size_t n) {
  std::vector<absl::string_view> pieces;
  remaining_ -= n;
  while (n > 0 && slice_ < slices_.size()) {
    const size_t take = std::min(n, slices_[slice_].size() - offset_);
    if (take > 0) pieces.emplace_back(reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_, take);
    n -= take;
    offset_ += take;
    if (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  return pieces;
}

void FrameReader::CopyNext(size_t n, char* dst) {
  remaining_ -= n;
  while (n > 0 && slice_ < slices_.size()) {
    const size_t take = std::min(n, slices_[slice_].size() - offset_);
    std::memcpy(dst, slices_[slice_].begin() + offset_, take);
    dst += take;
    n -= take;
    offset_ += take;
    if (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }
}

}  // namespace shardps
