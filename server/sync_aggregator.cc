#include "server/sync_aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status SyncAggregator::CheckStep(const KeyState& k, int rank, int64_t step) {
  if (k.last_pushed_step[rank] >= step || k.version == step) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("push for step ", step, " refused: key ", KeyName(k.info.key),
                                                    " is at step ", k.version.load()));
}

namespace {

void AddInto(float* __restrict sum, const float* __restrict values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += values[i];
}

// Adds the held gradients of ranks next_rank, next_rank + 1, ... while they
// are there; with `all`, every held one left, in rank order.
void AddHeld(KeyState& k, bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
  for (size_t r = k.next_rank; r < k.held.size(); ++r) {
    if (k.held[r].empty()) {
      if (!all) return;
      continue;
    }
    AddInto(k.grad_sum.data(), k.held[r].data(), k.info.length);
    std::vector<float>().swap(k.held[r]);
    if (!all) k.next_rank = static_cast<int>(r) + 1;
  }
}

}  // namespace

absl::StatusOr<wire::PushOutcome> SyncAggregator::Add(KeyState& k, int rank, int64_t step,
                                                      const ChunkPayload& grad) {
  // Pushed already (again after a failover, say): this step or a later one.
  if (k.last_pushed_step[rank] >= step) return wire::PUSH_DUPLICATE;
  if (absl::Status at_step = CheckStep(k, rank, step); !at_step.ok()) return at_step;
  if (k.grad_sum.empty()) {
    k.grad_sum.assign(k.info.length, 0.0f);
    k.contributed.assign(num_workers_, false);
    k.held.assign(num_workers_, {});
  }
  // The lowest rank not yet in the sum adds at once; any other waits as a
  // copy for the ranks below it.
  const bool in_turn = rank == k.next_rank;
  float* out = in_turn ? k.grad_sum.data() : (k.held[rank].assign(k.info.length, 0.0f), k.held[rank].data());
  ForEachGradientBlock(grad.pieces, grad.dtype,
                       [out](int64_t first, const UnalignedFloat* __restrict values, int64_t n) {
                         float* __restrict to = out + first;
                         for (int64_t i = 0; i < n; ++i) to[i] += values[i];
                       });
  if (in_turn) {
    k.next_rank = rank + 1;
    AddHeld(k, /*all=*/false);
  }
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
  AddHeld(k, /*all=*/true);  // ranks after one that never pushed (declared dead)
  const float count = static_cast<float>(k.contributors);
  float* __restrict sum = k.grad_sum.data();
  for (int64_t i = 0; i < k.info.length; ++i) sum[i] /= count;
  apply_(k, sum);
  std::fill(k.grad_sum.begin(), k.grad_sum.end(), 0.0f);
  std::fill(k.contributed.begin(), k.contributed.end(), false);
  k.contributors = 0;
  k.next_rank = 0;
  return true;
}

}  // namespace shardps
