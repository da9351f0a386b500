// Notices a run that diverges, so that it is reported rather than hidden: a
// loss that is not finite, or, from the second epoch's end on, an epoch whose
// mean loss is no lower than the loss of the job's first step (the
// untrained network's; a collapsed network sits near it, ln(10) = 2.30 on
// ten classes). A worker that joins a running job has no such yardstick and
// is checked for non-finite losses only. Names the likely cause. Pure; not
// thread-safe.
#ifndef SHARDPS_WORKER_DIVERGENCE_WATCH_H_
#define SHARDPS_WORKER_DIVERGENCE_WATCH_H_

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardps {

class DivergenceWatch {
 public:
  // `job` names what runs ("async mode with 2 workers").
  explicit DivergenceWatch(std::string job) : job_(std::move(job)) {}

  // The warning for a step's loss that is not finite, if it is not. Step 0's
  // loss is the yardstick.
  std::optional<std::string> CheckStep(int64_t step, float loss) {
    if (!std::isfinite(loss)) return absl::StrCat("training diverged: the loss at step ", step, " is ", loss, "; ", Cause());
    if (step == 0) first_loss_ = loss;
    return std::nullopt;
  }

  // The warning for epoch `epoch` (from 0) that ended with mean loss `mean`, if any.
  std::optional<std::string> CheckEpoch(int epoch, double mean) const {
    if (!std::isfinite(mean)) return absl::StrCat("training diverged: epoch ", epoch, "'s mean loss is ", mean, "; ", Cause());
    if (epoch < 1 || !first_loss_ || mean < *first_loss_) return std::nullopt;
    return absl::StrFormat("training diverges: epoch %d's mean loss %.4f is no lower than the first step's %.4f; %s",
                           epoch, mean, *first_loss_, Cause());
  }

 private:
  std::string Cause() const {
    return absl::StrCat("likely cause: a learning rate too large for ", job_,
                        " (lower --lr; in async and ssp, --async_lr_scaling=workers makes each push 1/N of a step)");
  }

  const std::string job_;
  std::optional<double> first_loss_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_DIVERGENCE_WATCH_H_
