// Server-side optimizers. An Optimizer is stateless and thread-safe: the
// per-key state (the "slots": momentum, Adam moments, AdaGrad sums) lives with
// the key and is passed in. Update rules follow PyTorch's SGD, Adam, AdamW and
// Adagrad.
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
  LrSchedule schedule;
};

// INVALID_ARGUMENT naming the option when a value is out of range.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Number of float slots of the key's size this optimizer keeps per key.
  virtual int NumSlots() const = 0;

  // One optimizer step on n values: the step that takes the key from version
  // `step` to step + 1, reading the weights from `from` and writing them to
  // `to`, which is either `from` itself (in place) or a disjoint array.
  // `slots` has NumSlots() arrays of n floats, updated in place, zero at the
  // key's first step. `grad` (at any alignment) is not modified.
  virtual void Apply(int64_t step, int64_t n, const UnalignedFloat* grad, const float* from, float* to,
                     float* const* slots) const = 0;
};

// REQUIRES: ValidateOptimizerOptions(options).ok().
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerOptions& options);

}  // namespace shardps

#endif  // SHARDPS_SERVER_OPTIMIZER_H_
