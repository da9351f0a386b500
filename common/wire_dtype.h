// The encodings tensor values travel in (proto DType): float32 as they are,
// or bfloat16 when a worker turns on wire compression (--wire_dtype): the
// top 16 bits of a float32, rounded to nearest even, half the bytes. The
// server always keeps and applies float32; only the wire is narrower.
#ifndef SHARDPS_COMMON_WIRE_DTYPE_H_
#define SHARDPS_COMMON_WIRE_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/shardps.pb.h"

namespace shardps {

// "float32" or "bfloat16"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<wire::DType> ParseWireDType(absl::string_view name);
// "float32", "bfloat16", or the enum's name for the others.
std::string WireDTypeName(wire::DType dtype);

// The encoding a pull's answer uses for `requested` (PullRequest.dtype):
// float32 when unspecified; INVALID_ARGUMENT for float16 and unknown values.
absl::StatusOr<wire::DType> PullAnswerDType(wire::DType requested);

// Bytes per value on the wire: 4 for float32, 2 for bfloat16, 0 for the
// encodings ShardPS does not accept (unspecified, float16).
int ValueBytes(wire::DType dtype);

// out[i] = in[i] rounded to the nearest bfloat16, ties to even. NaN stays
// NaN and infinities stay infinite; finite values above the largest
// bfloat16 become infinite, as IEEE rounding says.
void ToBfloat16(const float* in, int64_t n, uint16_t* out);
// out[i] = the bfloat16 at bytes + 2i (any alignment) as a float32 (exact).
void FromBfloat16(const char* bytes, int64_t n, float* out);

// True when the bfloat16 bit pattern is a NaN or an infinity.
inline bool Bfloat16NonFinite(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u; }

}  // namespace shardps

#endif  // SHARDPS_COMMON_WIRE_DTYPE_H_
