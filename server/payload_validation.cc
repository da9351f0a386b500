#include "server/payload_validation.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire_dtype.h"

namespace shardps {
namespace {

// Index of the first non-finite value among n values stored at `bytes`
// (any alignment) as `Bits` (uint32_t for float32, uint16_t for bfloat16),
// or -1. A value is NaN or Inf exactly when its exponent bits
// (`kExponent`) are all ones. Blocks are checked without branches, so the
// common all-finite case runs at memory speed.
template <typename Bits, Bits kExponent>
int64_t FirstNonFinite(const char* bytes, int64_t n) {
  constexpr int64_t kBlock = 4096;
  auto non_finite = [bytes](int64_t i) {
    Bits bits;
    std::memcpy(&bits, bytes + sizeof(Bits) * i, sizeof(Bits));
    return static_cast<uint32_t>((bits & kExponent) == kExponent);
  };
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t any = 0;
    for (int64_t i = start; i < end; ++i) any |= non_finite(i);
    if (any == 0) continue;
    for (int64_t i = start; i < end; ++i) {
      if (non_finite(i)) return i;
    }
  }
  return -1;
}

// Index of the first NaN or Inf in the payload, or -1.
int64_t FirstNonFiniteValue(const ChunkPayload& chunk, int value_bytes) {
  int64_t bad = -1;
  auto check = [&](int64_t first, const char* values, int64_t n) {
    if (bad >= 0) return;
    const int64_t at = value_bytes == 4 ? FirstNonFinite<uint32_t, 0x7f800000u>(values, n)
                                        : FirstNonFinite<uint16_t, 0x7f80u>(values, n);
    if (at >= 0) bad = first + at;
  };
  if (value_bytes == 4) {
    ForEachValueRun<4>(chunk.pieces, check);
  } else {
    ForEachValueRun<2>(chunk.pieces, check);
  }
  return bad;
}

}  // namespace

absl::Status CheckOwned(const KeyMap& map, const ChunkKey& key, int server) {
  const ChunkInfo* info = map.Find(key);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat("key ", KeyName(key), " is not in the layout"));
  if (info->server == server) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("key ", KeyName(key), " is owned by server ", info->server, ", not server ", server));
}

absl::Status CheckHeld(const KeyMap& map, const ChunkKey& key, int server, const std::vector<int>& held) {
  if (held.size() <= 1) return CheckOwned(map, key, server);
  const ChunkInfo* info = map.Find(key);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat("key ", KeyName(key), " is not in the layout"));
  for (int p : held) {
    if (info->server == p) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("key ", KeyName(key), " is owned by server ", info->server,
                                          " and not held by server ", server, " (neither as primary nor backup)"));
}

absl::Status ValidatePayload(const char* what, const ChunkPayload& chunk, int64_t length, bool bfloat16_allowed) {
  const int value_bytes = ValueBytes(chunk.dtype);
  if (value_bytes == 0 || (chunk.dtype == wire::DTYPE_BFLOAT16 && !bfloat16_allowed)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " for key ", KeyName(chunk.key), " has dtype ",
                                                   wire::DType_Name(chunk.dtype), "; want DTYPE_FLOAT32",
                                                   bfloat16_allowed ? " or DTYPE_BFLOAT16" : ""));
  }
  const int64_t bytes = PayloadBytes(chunk.pieces);
  if (bytes != length * value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " for key ", KeyName(chunk.key), " has ", bytes,
                                                   " bytes; want ", length * value_bytes, " (", length, " ",
                                                   WireDTypeName(chunk.dtype), " values)"));
  }
  if (const int64_t bad = FirstNonFiniteValue(chunk, value_bytes); bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " for key ", KeyName(chunk.key), " has a NaN or Inf at index ", bad));
  }
  return absl::OkStatus();
}

absl::Status CheckWireStep(const char* what, int64_t value) {
  if (InWireStepRange(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", value, "; want 0 to 2^62"));
}

absl::Status CheckReplicaSteps(int64_t version, const std::vector<int64_t>& last_pushed_step) {
  if (absl::Status in_range = CheckWireStep("version", version); !in_range.ok()) return in_range;
  for (int64_t step : last_pushed_step) {
    if (step < -1 || step > kMaxWireStep) {
      return absl::InvalidArgumentError(absl::StrCat("a last pushed step is ", step, "; want -1 to 2^62"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
