// A chunk's payload arrives in pieces (the received gRPC slices), which may
// split a float between two pieces and start at any address. These helpers
// walk it as aligned blocks of whole floats without copying it whole: aligned
// runs are used in place, the rest goes through a small bounce buffer that
// stays in cache.
#ifndef SHARDPS_SERVER_PAYLOAD_BLOCKS_H_
#define SHARDPS_SERVER_PAYLOAD_BLOCKS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardps {

using PayloadPieces = std::vector<absl::string_view>;

inline int64_t PayloadBytes(const PayloadPieces& pieces) {
  int64_t n = 0;
  for (absl::string_view p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

// Calls fn(first, bytes, count) for consecutive runs of whole floats as raw
// bytes at any alignment (read them with memcpy), in order; a float split
// across pieces comes alone from a small aligned buffer. No bounce copies:
// read-only passes such as validation use it directly.
template <typename Fn>
void ForEachFloatRun(const PayloadPieces& pieces, Fn fn) {
  alignas(float) char carry[4];  // a float split across pieces, passed in place
  size_t carried = 0;
  int64_t first = 0;
  for (absl::string_view piece : pieces) {
    const char* p = piece.data();
    size_t left = piece.size();
    if (carried > 0) {
      const size_t take = std::min(4 - carried, left);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      left -= take;
      if (carried < 4) continue;
      fn(first++, static_cast<const char*>(carry), int64_t{1});
      carried = 0;
    }
    const int64_t whole = static_cast<int64_t>(left / 4);
    if (whole > 0) fn(first, p, whole);
    first += whole;
    p += whole * 4;
    carried = piece.data() + piece.size() - p;
    std::memcpy(carry, p, carried);
  }
}

// Calls fn(first, values, count) for consecutive blocks of the payload's
// floats, in order: values[0..count) are floats first..first+count. `values`
// is 4-byte aligned and valid only during the call: aligned runs are passed
// in place, misaligned ones through the bounce buffer.
template <typename Fn>
void ForEachFloatBlock(const PayloadPieces& pieces, Fn fn) {
  constexpr int64_t kBounce = 4096;
  alignas(64) float bounce[kBounce];
  ForEachFloatRun(pieces, [&](int64_t first, const char* bytes, int64_t count) {
    if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
      fn(first, reinterpret_cast<const float*>(bytes), count);
      return;
    }
    for (int64_t done = 0; done < count; done += kBounce) {
      const int64_t n = std::min(count - done, kBounce);
      std::memcpy(bounce, bytes + done * 4, n * 4);
      fn(first + done, static_cast<const float*>(bounce), n);
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
