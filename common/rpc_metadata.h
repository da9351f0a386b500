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

// Replication: the servers the sender knows to have failed (a bit per
// server id, 16 hex digits), on requests from workers and on every answer.
// A server that learns of a failure takes over the keys it backs up; a
// worker routes around it (common/replica_map.h).
inline constexpr char kFailedServersKey[] = "shardps-failed-servers";
// Its value: the bits, written and read as an incarnation is.
inline std::string FailedServersText(uint64_t bits) { return IncarnationText(bits); }
inline std::optional<uint64_t> ParseFailedServers(absl::string_view text) { return ParseIncarnation(text); }

}  // namespace shardps

#endif  // SHARDPS_COMMON_RPC_METADATA_H_
