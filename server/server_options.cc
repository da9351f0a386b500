#include "server/server_options.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<AsyncLrScaling> ParseAsyncLrScaling(const std::string& text) {
  if (text == "workers") return AsyncLrScaling::kWorkers;
  if (text == "none") return AsyncLrScaling::kNone;
  if (text == "auto") return AsyncLrScaling::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --async_lr_scaling '", text, "'; want auto, workers or none"));
}

absl::StatusOr<StalenessLr> ParseStalenessLr(const std::string& text) {
  if (text == "none") return StalenessLr::kNone;
  if (text == "inverse") return StalenessLr::kInverse;
  if (text == "capped") return StalenessLr::kCapped;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --staleness_lr '", text, "'; want none, inverse or capped"));
}

absl::StatusOr<double> ParseMomentumLookahead(const std::string& text) {
  if (text == "auto") return kAutoLookahead;
  if (text == "none") return 0.0;
  double updates = 0;
  if (!absl::SimpleAtod(text, &updates) || !(updates >= 0) || !std::isfinite(updates)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --momentum_lookahead '", text, "'; want auto, none or a number of updates >= 0"));
  }
  return updates;
}

std::string StalenessLrName(StalenessLr rule) {
  switch (rule) {
    case StalenessLr::kNone: return "none";
    case StalenessLr::kInverse: return "inverse";
    case StalenessLr::kCapped: return "capped";
  }
  return "unknown";
}

int PushesPerStep(const ServerOptions& o) {
  const bool adagrad = o.optimizer.kind == OptimizerKind::kAdaGrad;
  const bool per_push = o.job.mode != Mode::kSync &&
                        ResolveAsyncLrScaling(o.async_lr_scaling, adagrad) == AsyncLrScaling::kWorkers;
  return per_push ? o.job.num_workers : 1;
}

}  // namespace shardps

namespace shardps {

double LookaheadUpdates(const ServerOptions& o) {
  if (o.momentum_lookahead != kAutoLookahead) return o.momentum_lookahead;
  const OptimizerOptions& opt = o.optimizer;
  const bool plain_momentum = opt.kind == OptimizerKind::kSgd && opt.momentum > 0 && !opt.nesterov;
  if (o.job.mode == Mode::kSync || !plain_momentum) return 0;
  return kLookaheadPerOtherWorker * (o.job.num_workers - 1);
}

}  // namespace shardps
