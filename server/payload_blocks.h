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
#include "server/optimizer.h"

namespace shardps {

using PayloadPieces = std::vector<absl::string_view>;

inline int64_t PayloadBytes(const PayloadPieces& pieces) {
  int64_t n = 0;
  for (absl::string_view p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

// Calls fn(first, values, count) for consecutive runs of the payload's whole
// floats, in order: values[0..count) are floats first..first+count, read in
// place at any alignment. A float split across pieces comes alone from a
// small buffer. Nothing is copied in bulk.
template <typename Fn>
void ForEachFloatRun(const PayloadPieces& pieces, Fn fn) {
  alignas(float) char carry[4];  // a float split across pieces
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
      fn(first++, reinterpret_cast<const UnalignedFloat*>(carry), int64_t{1});
      carried = 0;
    }
    const int64_t whole = static_cast<int64_t>(left / 4);
    if (whole > 0) fn(first, reinterpret_cast<const UnalignedFloat*>(p), whole);
    first += whole;
    p += whole * 4;
    carried = piece.data() + piece.size() - p;
    std::memcpy(carry, p, carried);
  }
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
