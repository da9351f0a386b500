// Server-side optimizers. An Optimizer is stateless and thread-safe: the
// per-key state (the "slots": momentum, Adam moments, AdaGrad sums) lives with
// the key and is passed in. Update rules follow PyTorch's SGD, Adam, AdamW and
// Adagrad.
//
// One meaning for the hyperparameters in every mode: with
// pushes_per_step = N (async and ssp jobs of N workers, where every push is
// an update of its own), each update is 1/N of a step. Its learning rate is
// lr/N; the schedule's step is the key's updates / N; and the slots are
// kept so that N updates with the same gradient leave them as one step
// would: SGD's momentum decays by momentum^(1/N) per update and takes the
// gradient with weight (1 - momentum^(1/N)) / (1 - momentum), so its size
// and its memory in steps match a sync step's; Adam's moments decay by
// beta^(1/N) per update, and its bias correction counts updates with those
// decays (1 - beta^(updates / N)); AdaGrad adds gradient^2 / N per update.
//
// Momentum lookahead (SGD with momentum, async and ssp; lookahead_updates =
// L > 0): the weights the server keeps and serves are not the momentum's
// current point w but where its momentum alone will have carried w after L
// more updates, u = w - lr * s * v with s = mu + mu^2 + ... + mu^L (mu the
// per-update decay). A push computed on weights L updates old is then a
// gradient at about the weights it is applied to (DANA, Hakimi et al.
// 2019). Kept in u's terms, one update is
//   v' = mu * v + weight * g;   u' = u + lr * s * v - lr * (1 + s) * v'
// (g the gradient with weight decay on u). L = 0 is plain momentum.
#ifndef SHARDPS_SERVER_OPTIMIZER_H_
#define SHARDPS_SERVER_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/lr_schedule.h"

namespace shardps {

// A float read in place at any address: gradients are read straight from
// the received gRPC slices, whose floats need not be 4-byte aligned. x86
// vector loads do not care; the type tells the compiler so (GCC and Clang).
typedef float UnalignedFloat __attribute__((aligned(1)));

enum class OptimizerKind { kSgd, kAdam, kAdamW, kAdaGrad };

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& text);
std::string OptimizerName(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.1;
  double momentum = 0.0;      // SGD.
  bool nesterov = false;      // SGD; needs momentum > 0.
  double weight_decay = 0.0;  // L2 for SGD, Adam, AdaGrad; decoupled for AdamW.
  double beta1 = 0.9;         // Adam, AdamW.
  double beta2 = 0.999;       // Adam, AdamW.
  double epsilon = 1e-8;      // Adam, AdamW, AdaGrad.
  LrSchedule schedule;        // in steps
  int pushes_per_step = 1;    // updates that make one step (see the file comment).
  double lookahead_updates = 0;  // SGD with momentum, not Nesterov (see the file comment).
};

// Where an update stands.
struct UpdateStep {
  int64_t version = 0;    // updates applied to the key before this one
  double lr_scale = 1.0;  // a factor on the scheduled learning rate (a stale push's)
};

// INVALID_ARGUMENT naming the option when a value is out of range.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Number of float slots of the key's size this optimizer keeps per key.
  virtual int NumSlots() const = 0;

  // One update of n values: the one that takes the key from version
  // at.version to at.version + 1, reading the weights from `from` and
  // writing them to `to`, which is either `from` itself (in place) or a
  // disjoint array. `slots` has NumSlots() arrays of n floats, updated in
  // place, zero at the key's first update. `grad` (at any alignment) is not
  // modified.
  virtual void Apply(const UpdateStep& at, int64_t n, const UnalignedFloat* grad, const float* from, float* to,
                     float* const* slots) const = 0;

  // The learning rate of the update at `at`: the schedule's at step
  // version / pushes_per_step, over pushes_per_step, times at.lr_scale.
  static double UpdateLr(const OptimizerOptions& o, const UpdateStep& at);
};

// REQUIRES: ValidateOptimizerOptions(options).ok().
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerOptions& options);

}  // namespace shardps

#endif  // SHARDPS_SERVER_OPTIMIZER_H_
