#include "common/job_view.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardps {

absl::StatusOr<Mode> ParseMode(const std::string& text) {
  if (text == "sync") return Mode::kSync;
  if (text == "async") return Mode::kAsync;
  if (text == "ssp") return Mode::kSsp;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", text, "'; want sync, async or ssp"));
}

std::string ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kSsp: return "ssp";
  }
  return "unknown";
}

wire::Mode ModeToProto(Mode mode) {
  switch (mode) {
    case Mode::kSync: return wire::MODE_SYNC;
    case Mode::kAsync: return wire::MODE_ASYNC;
    case Mode::kSsp: return wire::MODE_SSP;
  }
  return wire::MODE_UNSPECIFIED;
}

absl::StatusOr<Mode> ModeFromProto(wire::Mode mode) {
  switch (mode) {
    case wire::MODE_SYNC: return Mode::kSync;
    case wire::MODE_ASYNC: return Mode::kAsync;
    case wire::MODE_SSP: return Mode::kSsp;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown mode enum value ", mode));
}

wire::JobView JobViewToProto(const JobView& view) {
  wire::JobView proto;
  proto.set_mode(ModeToProto(view.mode));
  proto.set_staleness(view.staleness);
  proto.set_num_servers(view.num_servers);
  proto.set_num_workers(view.num_workers);
  proto.set_layout_hash(view.layout_hash);
  proto.set_partition_bytes(view.partition_bytes);
  proto.set_replicas(view.replicas);
  return proto;
}

absl::StatusOr<JobView> JobViewFromProto(const wire::JobView& proto) {
  absl::StatusOr<Mode> mode = ModeFromProto(proto.mode());
  if (!mode.ok()) return mode.status();
  JobView view;
  view.mode = *mode;
  view.staleness = proto.staleness();
  view.num_servers = proto.num_servers();
  view.num_workers = proto.num_workers();
  view.layout_hash = proto.layout_hash();
  view.partition_bytes = proto.partition_bytes();
  view.replicas = proto.replicas() == 0 ? 1 : proto.replicas();
  return view;
}

namespace {
template <typename T>
absl::Status Differs(const char* field, const T& ours, const T& theirs) {
  return absl::FailedPreconditionError(
      absl::StrCat("job configuration mismatch: ", field, " is ", theirs,
                   " on the worker but ", ours, " on the server"));
}
}  // namespace

absl::Status CheckJobViewsAgree(const JobView& ours, const JobView& theirs) {
  if (ours.mode != theirs.mode) return Differs("mode", ModeName(ours.mode), ModeName(theirs.mode));
  if (ours.mode == Mode::kSsp && ours.staleness != theirs.staleness) {
    return Differs("staleness", ours.staleness, theirs.staleness);
  }
  if (ours.num_servers != theirs.num_servers) {
    return Differs("num_servers", ours.num_servers, theirs.num_servers);
  }
  if (ours.num_workers != theirs.num_workers) {
    return Differs("num_workers", ours.num_workers, theirs.num_workers);
  }
  if (ours.partition_bytes != theirs.partition_bytes) {
    return Differs("partition_bytes", ours.partition_bytes, theirs.partition_bytes);
  }
  if (ours.replicas != theirs.replicas) return Differs("replicas", ours.replicas, theirs.replicas);
  if (ours.layout_hash != 0 && ours.layout_hash != theirs.layout_hash) {
    return Differs("layout_hash", absl::StrFormat("%016x", ours.layout_hash),
                   absl::StrFormat("%016x", theirs.layout_hash));
  }
  return absl::OkStatus();
}

}  // namespace shardps
