// A chunk's payload arrives in pieces (the received gRPC slices), which may
// split a float between two pieces and start at any address (HTTP/2 frame
// headers sit between them). These helpers walk it in place.
#ifndef SHARDPS_SERVER_PAYLOAD_BLOCKS_H_
#define SHARDPS_SERVER_PAYLOAD_BLOCKS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/key_partition.h"
#include "common/wire_dtype.h"
#include <optional>

#include "proto/shardps.pb.h"
#include "server/optimizer.h"

namespace shardps {

using PayloadPieces = std::vector<absl::string_view>;

// A chunk as it arrives: the payload is borrowed from the request, in one or
// more pieces that together hold its bytes in order.
struct ChunkPayload {
  ChunkKey key;
  wire::DType dtype = wire::DTYPE_FLOAT32;
  PayloadPieces pieces;
  // Pushes: the key's version the gradient was computed from (the version
  // its pull answered); none when the worker did not say.
  std::optional<int64_t> base_version;
};

// A pushed chunk's base_version, if it carries one.
inline std::optional<int64_t> BaseVersionOf(const wire::Chunk& c) {
  if (!c.has_base_version()) return std::nullopt;
  return c.base_version();
}

inline int64_t PayloadBytes(const PayloadPieces& pieces) {
  int64_t n = 0;
  for (absl::string_view p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

// Calls fn(first, bytes, count) for consecutive runs of the payload's whole
// values of kBytes bytes each, in order: bytes holds values first..first+count
// in place, at any alignment. A value split across pieces comes alone from
// a small buffer. Nothing is copied in bulk.
template <size_t kBytes, typename Fn>
void ForEachValueRun(const PayloadPieces& pieces, Fn fn) {
  alignas(4) char carry[kBytes];  // a value split across pieces
  size_t carried = 0;
  int64_t first = 0;
  for (absl::string_view piece : pieces) {
    const char* p = piece.data();
    size_t left = piece.size();
    if (carried > 0) {
      const size_t take = std::min(kBytes - carried, left);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      left -= take;
      if (carried < kBytes) continue;
      fn(first++, static_cast<const char*>(carry), int64_t{1});
      carried = 0;
    }
    const int64_t whole = static_cast<int64_t>(left / kBytes);
    if (whole > 0) fn(first, p, whole);
    first += whole;
    p += whole * kBytes;
    carried = piece.data() + piece.size() - p;
    std::memcpy(carry, p, carried);
  }
}

// ForEachValueRun over float32 values, read in place as UnalignedFloat.
template <typename Fn>
void ForEachFloatRun(const PayloadPieces& pieces, Fn fn) {
  ForEachValueRun<4>(pieces, [&](int64_t first, const char* bytes, int64_t count) {
    fn(first, reinterpret_cast<const UnalignedFloat*>(bytes), count);
  });
}

// The payload's float32 values in a vector of their own (a copy's values to
// keep), written once: a vector sized first would be zeroed first.
inline std::vector<float> FloatsOf(const PayloadPieces& pieces) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(PayloadBytes(pieces) / 4));
  ForEachFloatRun(pieces, [&](int64_t, const UnalignedFloat* values, int64_t count) {
    out.insert(out.end(), values, values + count);
  });
  return out;
}

// Calls fn(first, values, count) for consecutive blocks of a gradient's
// values as float32, in order: float32 payloads are read in place;
// bfloat16 ones are widened a block at a time into a buffer that stays in
// cache. REQUIRES: ValueBytes(dtype) > 0.
template <typename Fn>
void ForEachGradientBlock(const PayloadPieces& pieces, wire::DType dtype, Fn fn) {
  if (dtype == wire::DTYPE_FLOAT32) return ForEachFloatRun(pieces, fn);
  constexpr int64_t kBlock = 4096;
  alignas(64) float widened[kBlock];
  ForEachValueRun<2>(pieces, [&](int64_t first, const char* bytes, int64_t count) {
    for (int64_t done = 0; done < count; done += kBlock) {
      const int64_t n = std::min(count - done, kBlock);
      FromBfloat16(bytes + 2 * done, n, widened);
      fn(first + done, static_cast<const UnalignedFloat*>(widened), n);
    }
  });
}

// Copies the payload to dst (PayloadBytes(pieces) bytes).
inline void CopyPayload(const PayloadPieces& pieces, char* dst) {
  for (absl::string_view p : pieces) {
    std::memcpy(dst, p.data(), p.size());
    dst += p.size();
  }
}

}  // namespace shardps

#endif  // SHARDPS_SERVER_PAYLOAD_BLOCKS_H_
