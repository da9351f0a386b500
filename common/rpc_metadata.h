// Metadata every ShardPS answer carries (proto/shardps.proto, conventions).
#ifndef SHARDPS_COMMON_RPC_METADATA_H_
#define SHARDPS_COMMON_RPC_METADATA_H_

#include <grpcpp/support/string_ref.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace shardps {

// Metadata to send, as (key, value) pairs, and metadata received (a
// request's client metadata or an answer's trailing metadata).
using MetadataPairs = std::vector<std::pair<std::string, std::string>>;
using ReceivedMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// Trailing metadata key: the answering server's incarnation, 16 hex digits.
inline constexpr char kIncarnationKey[] = "shardps-incarnation";

inline std::string IncarnationText(uint64_t incarnation) { return absl::StrFormat("%016x", incarnation); }

inline std::optional<uint64_t> ParseIncarnation(absl::string_view text) {
  uint64_t value = 0;
  if (text.size() != 16 || !absl::SimpleHexAtoi(text, &value)) return std::nullopt;
  return value;
}

// Replication: the sender's view of the job's servers (which failed, which
// are joining again; common/replica_map.h, ServerView::Text), on requests
// from workers and between servers, and on every answer, once anything has
// happened. A server that learns of a failure takes over the keys it backs
// up; one that learns of a joining server copies it the keys it serves; a
// worker routes around failed servers.
inline constexpr char kServerViewKey[] = "shardps-server-view";
// Beside it, once a server joined at a new address (a spare):
// common/moved_servers.h's text. Read before the view, so that a server
// shown joining or live is reached where it is.
inline constexpr char kServerMovedKey[] = "shardps-server-moved";

// Sync and ssp with --checkpoint_every_seconds: a step some server chose to
// checkpoint at (decimal), on every answer of a server that knows of one and
// on every request of a worker that heard of one, so that every server
// checkpoints the same step (server/shard_checkpointer.h, "By time").
inline constexpr char kCheckpointStepKey[] = "shardps-checkpoint-step";

inline std::string CheckpointStepText(int64_t step) { return std::to_string(step); }

// The step, or nullopt for text that is not a decimal step >= 0.
inline std::optional<int64_t> ParseCheckpointStep(absl::string_view text) {
  int64_t step = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (!absl::SimpleAtoi(text, &step)) return std::nullopt;
  return step;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_RPC_METADATA_H_
