// Learning-rate schedules, as a pure function of the key's step.
#ifndef SHARDPS_SERVER_LR_SCHEDULE_H_
#define SHARDPS_SERVER_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardps {

enum class LrScheduleKind { kConstant, kStep, kCosine };

absl::StatusOr<LrScheduleKind> ParseLrSchedule(const std::string& text);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;  // linear warm-up: lr * (t + 1) / warmup_steps while t < warmup.
  int64_t step_size = 1000;  // kStep: multiply by gamma every step_size steps.
  double gamma = 0.1;        // kStep.
  int64_t total_steps = 10000;  // kCosine: steps from lr down to min_lr.
  double min_lr = 0.0;          // kCosine.
};

// The learning rate for the optimizer step that takes a key from version
// `step` to step + 1.
double LearningRateAt(const LrSchedule& schedule, double base_lr, int64_t step);

}  // namespace shardps

#endif  // SHARDPS_SERVER_LR_SCHEDULE_H_
