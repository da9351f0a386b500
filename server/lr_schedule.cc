#include "server/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<LrScheduleKind> ParseLrSchedule(const std::string& text) {
  if (text == "constant") return LrScheduleKind::kConstant;
  if (text == "step") return LrScheduleKind::kStep;
  if (text == "cosine") return LrScheduleKind::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown lr schedule '", text, "'; want constant, step or cosine"));
}

double LearningRateAt(const LrSchedule& s, double base_lr, int64_t step) {
  double lr = base_lr;
  switch (s.kind) {
    case LrScheduleKind::kConstant:
      break;
    case LrScheduleKind::kStep:
      lr = base_lr * std::pow(s.gamma, static_cast<double>(step / std::max<int64_t>(1, s.step_size)));
      break;
    case LrScheduleKind::kCosine: {
      const double total = static_cast<double>(std::max<int64_t>(1, s.total_steps));
      const double t = std::min(static_cast<double>(step), total);
      lr = s.min_lr + 0.5 * (base_lr - s.min_lr) * (1.0 + std::cos(M_PI * t / total));
      break;
    }
  }
  if (step < s.warmup_steps) lr *= static_cast<double>(step + 1) / s.warmup_steps;
  return lr;
}

}  // namespace shardps
