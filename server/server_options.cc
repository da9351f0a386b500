#include "server/server_options.h"

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<AsyncLrScaling> ParseAsyncLrScaling(const std::string& text) {
  if (text == "workers") return AsyncLrScaling::kWorkers;
  if (text == "none") return AsyncLrScaling::kNone;
  return absl::InvalidArgumentError(absl::StrCat("unknown --async_lr_scaling '", text, "'; want workers or none"));
}

absl::StatusOr<StalenessLr> ParseStalenessLr(const std::string& text) {
  if (text == "none") return StalenessLr::kNone;
  if (text == "inverse") return StalenessLr::kInverse;
  return absl::InvalidArgumentError(absl::StrCat("unknown --staleness_lr '", text, "'; want none or inverse"));
}

int PushesPerStep(const ServerOptions& o) {
  const bool per_push = o.job.mode != Mode::kSync && o.async_lr_scaling == AsyncLrScaling::kWorkers;
  return per_push ? o.job.num_workers : 1;
}

}  // namespace shardps
