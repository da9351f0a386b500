#include "common/wire_dtype.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<wire::DType> ParseWireDType(absl::string_view name) {
  if (name == "float32") return wire::DTYPE_FLOAT32;
  if (name == "bfloat16") return wire::DTYPE_BFLOAT16;
  return absl::InvalidArgumentError(absl::StrCat("unknown wire dtype '", name, "'; want float32 or bfloat16"));
}

std::string WireDTypeName(wire::DType dtype) {
  switch (dtype) {
    case wire::DTYPE_FLOAT32: return "float32";
    case wire::DTYPE_BFLOAT16: return "bfloat16";
    default: return wire::DType_Name(dtype);
  }
}

absl::StatusOr<wire::DType> PullAnswerDType(wire::DType requested) {
  if (requested == wire::DTYPE_UNSPECIFIED) return wire::DTYPE_FLOAT32;
  if (requested == wire::DTYPE_FLOAT32 || requested == wire::DTYPE_BFLOAT16) return requested;
  return absl::InvalidArgumentError(absl::StrCat("pull asks for dtype ", wire::DType_Name(requested),
                                                 "; want DTYPE_FLOAT32 or DTYPE_BFLOAT16"));
}

int ValueBytes(wire::DType dtype) {
  switch (dtype) {
    case wire::DTYPE_FLOAT32: return 4;
    case wire::DTYPE_BFLOAT16: return 2;
    default: return 0;
  }
}

// Plain loops over 32-bit patterns, without branches, so that they vectorise.
void ToBfloat16(const float* __restrict in, int64_t n, uint16_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, 4);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even.
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>(nan ? (bits >> 16) | 0x0040u : rounded);
  }
}

void FromBfloat16(const char* __restrict bytes, int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t half;
    std::memcpy(&half, bytes + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(out + i, &bits, 4);
  }
}

}  // namespace shardps
