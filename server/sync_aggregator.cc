#include "server/sync_aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status SyncAggregator::CheckStep(const KeyState& k, int rank, int64_t step) {
  if (k.last_pushed_step[rank] == step || k.version == step) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("push for step ", step, " refused: key ", KeyName(k.info.key),
                                                    " is at step ", k.version.load()));
}

absl::StatusOr<wire::PushOutcome> SyncAggregator::Add(KeyState& k, int rank, int64_t step,
                                                      const ChunkPayload& grad) {
  if (k.last_pushed_step[rank] == step) return wire::PUSH_DUPLICATE;
  if (absl::Status at_step = CheckStep(k, rank, step); !at_step.ok()) return at_step;
  if (k.grad_sum.empty()) {
    k.grad_sum.assign(k.info.length, 0.0f);
    k.contributed.assign(num_workers_, false);
  }
  float* sum = k.grad_sum.data();
  ForEachGradientBlock(grad.pieces, grad.dtype,
                       [sum](int64_t first, const UnalignedFloat* __restrict values, int64_t n) {
                         float* __restrict out = sum + first;
                         for (int64_t i = 0; i < n; ++i) out[i] += values[i];
                       });
  k.contributed[rank] = true;
  ++k.contributors;
  k.last_pushed_step[rank] = step;
  return CompleteIfReady(k) ? wire::PUSH_APPLIED : wire::PUSH_BUFFERED;
}

bool SyncAggregator::CompleteIfReady(KeyState& k) {
  if (k.contributors == 0) return false;
  const std::vector<bool> required = membership_->RequiredForStep(k.version);
  for (size_t r = 0; r < required.size(); ++r) {
    if (required[r] && !k.contributed[r]) return false;
  }
  if (k.contributors < num_workers_) steps_completed_short_.fetch_add(1);
  const float count = static_cast<float>(k.contributors);
  float* __restrict sum = k.grad_sum.data();
  for (int64_t i = 0; i < k.info.length; ++i) sum[i] /= count;
  apply_(k, sum);
  std::fill(k.grad_sum.begin(), k.grad_sum.end(), 0.0f);
  std::fill(k.contributed.begin(), k.contributed.end(), false);
  k.contributors = 0;
  return true;
}

}  // namespace shardps
