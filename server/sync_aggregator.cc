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

// to[i] += from[i], or with `overwrite` to[i] = 0 + from[i]: the first
// values of a sum (or of a held copy) are written, not added to zeros
// cleared beforehand, and come out bitwise the same (0 + -0 is +0).
void Accumulate(float* __restrict to, const UnalignedFloat* __restrict from, int64_t n, bool overwrite) {
  if (overwrite) {
    for (int64_t i = 0; i < n; ++i) to[i] = 0.0f + from[i];
  } else {
    for (int64_t i = 0; i < n; ++i) to[i] += from[i];
  }
}

// Adds the held gradients of ranks next_rank, next_rank + 1, ... while they
// are there; with `all`, every held one left, in rank order.
void AddHeld(KeyState& k, bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu) {
  bool sum_empty = k.next_rank == 0;  // only with `all`: rank 0 never pushed
  for (size_t r = k.next_rank; r < k.held.size(); ++r) {
    if (k.held[r] == nullptr) {
      if (!all) return;
      continue;
    }
    Accumulate(k.grad_sum.data(), k.held[r].get(), k.info.length, sum_empty);
    sum_empty = false;
    k.held[r].reset();
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
    k.held.resize(num_workers_);
  }
  // The lowest rank not yet in the sum adds at once (rank 0 writes it);
  // any other waits as a copy for the ranks below it.
  const bool in_turn = rank == k.next_rank;
  if (!in_turn) k.held[rank].reset(new float[k.info.length]);  // written whole below
  float* out = in_turn ? k.grad_sum.data() : k.held[rank].get();
  const bool overwrite = !in_turn || k.next_rank == 0;
  ForEachGradientBlock(grad.pieces, grad.dtype, [out, overwrite](int64_t first, const UnalignedFloat* values, int64_t n) {
    Accumulate(out + first, values, n, overwrite);
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
  apply_(k, sum);  // the next step's first rank overwrites the sum
  std::fill(k.contributed.begin(), k.contributed.end(), false);
  k.contributors = 0;
  k.next_rank = 0;
  return true;
}

}  // namespace shardps
