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
// checkpoint at, and the timeline it belongs to ("<timeline>:<step>",
// decimal), on every answer of a server that knows of one and on every
// request of a worker that heard of one, so that every server checkpoints the
// same step (server/shard_checkpointer.h, "By time"). A server ignores a step
// of another timeline (from before a rewind).
inline constexpr char kCheckpointStepKey[] = "shardps-checkpoint-step";

struct CheckpointStep {
  int64_t timeline = 0;
  int64_t step = 0;
  // The newer of two: the later timeline, then the later step.
  bool operator<(const CheckpointStep& o) const {
    return timeline != o.timeline ? timeline < o.timeline : step < o.step;
  }
};

inline std::string CheckpointStepText(const CheckpointStep& c) {
  return std::to_string(c.timeline) + ":" + std::to_string(c.step);
}

// The timeline and step, or nullopt for text that is not two decimals >= 0
// joined by a colon.
inline std::optional<CheckpointStep> ParseCheckpointStep(absl::string_view text) {
  auto decimal = [](absl::string_view d, int64_t* out) {
    if (d.empty() || d.size() > 18) return false;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
    }
    return absl::SimpleAtoi(d, out);
  };
  const size_t colon = text.find(':');
  CheckpointStep c;
  if (colon == absl::string_view::npos || !decimal(text.substr(0, colon), &c.timeline) ||
      !decimal(text.substr(colon + 1), &c.step)) {
    return std::nullopt;
  }
  return c;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_RPC_METADATA_H_
