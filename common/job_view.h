// A process's view of the job: what every worker and server must agree on.
#ifndef SHARDPS_COMMON_JOB_VIEW_H_
#define SHARDPS_COMMON_JOB_VIEW_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/shardps.pb.h"

namespace shardps {

enum class Mode { kSync, kAsync, kSsp };

absl::StatusOr<Mode> ParseMode(const std::string& text);  // "sync", "async", "ssp"
std::string ModeName(Mode mode);
wire::Mode ModeToProto(Mode mode);
absl::StatusOr<Mode> ModeFromProto(wire::Mode mode);

// A key's largest size. Small enough that a large tensor spreads over the
// servers and that no fetch holds a link for long (a fetch is one
// partition by default, a push up to kDefaultPushRequestBytes of them:
// client/ps_requests.h); large enough that per-key costs stay small. 32 KB:
// on the emulated cluster at N = 8 it lifts every mode by 0.01-0.02 over
// 64 KB at 1.3x the CPU; 16 KB costs more CPU than it gains (README,
// "Scaling on an emulated cluster").
inline constexpr int64_t kDefaultPartitionBytes = 32 << 10;
// A worker's push requests carry up to this many bytes of one server's keys
// (ClientOptions::push_request_bytes).
inline constexpr int64_t kDefaultPushRequestBytes = 1 << 20;

struct JobView {
  Mode mode = Mode::kSync;
  int staleness = 0;
  int num_servers = 1;
  int num_workers = 1;
  uint64_t layout_hash = 0;  // 0: not known yet (a server before any Init).
  int64_t partition_bytes = kDefaultPartitionBytes;
  int replicas = 1;  // copies of every key (common/replica_map.h)
};

wire::JobView JobViewToProto(const JobView& view);
absl::StatusOr<JobView> JobViewFromProto(const wire::JobView& proto);

// OK when `theirs` agrees with `ours`; otherwise FAILED_PRECONDITION naming
// the first field that differs and both values. A layout hash of 0 on our
// side matches any layout.
absl::Status CheckJobViewsAgree(const JobView& ours, const JobView& theirs);

}  // namespace shardps

#endif  // SHARDPS_COMMON_JOB_VIEW_H_
