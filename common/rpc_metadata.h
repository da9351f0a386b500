// Metadata every ShardPS answer carries (proto/shardps.proto, conventions).
#ifndef SHARDPS_COMMON_RPC_METADATA_H_
#define SHARDPS_COMMON_RPC_METADATA_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace shardps {

// Trailing metadata key: the answering server's incarnation, 16 hex digits.
inline constexpr char kIncarnationKey[] = "shardps-incarnation";

inline std::string IncarnationText(uint64_t incarnation) { return absl::StrFormat("%016x", incarnation); }

inline std::optional<uint64_t> ParseIncarnation(absl::string_view text) {
  uint64_t value = 0;
  if (text.size() != 16 || !absl::SimpleHexAtoi(text, &value)) return std::nullopt;
  return value;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_RPC_METADATA_H_
