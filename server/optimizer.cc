#include "server/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& text) {
  if (text == "sgd") return OptimizerKind::kSgd;
  if (text == "adam") return OptimizerKind::kAdam;
  if (text == "adamw") return OptimizerKind::kAdamW;
  if (text == "adagrad") return OptimizerKind::kAdaGrad;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", text, "'; want sgd, adam, adamw or adagrad"));
}

std::string OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdaGrad: return "adagrad";
  }
  return "unknown";
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](const char* name, double v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is ", v, "; want ", want));
  };
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return bad("lr", o.lr, "> 0");
  if (!(o.momentum >= 0 && o.momentum < 1)) return bad("momentum", o.momentum, "in [0, 1)");
  if (o.nesterov && o.momentum == 0) return bad("momentum", o.momentum, "> 0 with nesterov");
  if (!(o.weight_decay >= 0)) return bad("weight_decay", o.weight_decay, ">= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", o.beta1, "in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", o.beta2, "in [0, 1)");
  if (!(o.epsilon > 0)) return bad("epsilon", o.epsilon, "> 0");
  if (o.schedule.warmup_steps < 0) return bad("lr_warmup_steps", o.schedule.warmup_steps, ">= 0");
  if (o.schedule.step_size < 1) return bad("lr_step_size", o.schedule.step_size, ">= 1");
  if (o.schedule.total_steps < 1) return bad("lr_total_steps", o.schedule.total_steps, ">= 1");
  if (o.pushes_per_step < 1) return bad("pushes_per_step", o.pushes_per_step, ">= 1");
  if (!(o.lookahead_updates >= 0) || !std::isfinite(o.lookahead_updates)) {
    return bad("momentum_lookahead", o.lookahead_updates, ">= 0 (updates)");
  }
  if (o.lookahead_updates > 0 && (o.kind != OptimizerKind::kSgd || o.momentum == 0 || o.nesterov)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum_lookahead is ", o.lookahead_updates,
                                                   "; it needs sgd with momentum > 0 and without nesterov"));
  }
  return absl::OkStatus();
}

double Optimizer::UpdateLr(const OptimizerOptions& o, const UpdateStep& at) {
  return LearningRateAt(o.schedule, o.lr, at.version / o.pushes_per_step) / o.pushes_per_step * at.lr_scale;
}

namespace {

// The loops below are plain indexed loops over restrict pointers so that the
// compiler vectorises them. `from` and `to` may be the same array, so they
// are not restrict: the compiler checks at run time that they are equal or
// apart, and both cases take the vector loop.

// The per-update decay of a per-step decay `beta` when a step is n updates.
double PerUpdate(double beta, int n) { return std::pow(beta, 1.0 / n); }

// mu + mu^2 + ... + mu^updates (for whole or fractional updates): how far,
// in units of lr * v, the momentum alone carries the weights in that many
// updates.
double MomentumReach(double mu, double updates) {
  if (updates <= 0 || mu <= 0) return 0;
  return mu * (1 - std::pow(mu, updates)) / (1 - mu);
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerOptions& o)
      : o_(o),
        mu_(static_cast<float>(PerUpdate(o.momentum, o.pushes_per_step))),
        // The gradient's weight in the buffer: 1 with one update per step.
        weight_(static_cast<float>(o.momentum > 0 ? (1.0 - mu_) / (1.0 - o.momentum) : 1.0)),
        reach_(static_cast<float>(MomentumReach(mu_, o.lookahead_updates))) {}
  int NumSlots() const override { return o_.momentum > 0 ? 1 : 0; }

  void Apply(const UpdateStep& at, int64_t n, const UnalignedFloat* __restrict grad, const float* from, float* to,
             float* const* slots) const override {
    const float lr = static_cast<float>(UpdateLr(o_, at));
    const float wd = static_cast<float>(o_.weight_decay);
    if (o_.momentum == 0) {
      for (int64_t i = 0; i < n; ++i) to[i] = from[i] - lr * (grad[i] + wd * from[i]);
      return;
    }
    const float mu = mu_, w = weight_;
    float* __restrict v = slots[0];
    // PyTorch starts the buffer at the first gradient: with v = 0 that is mu*0 + g.
    if (reach_ > 0) return ApplyLookahead(lr, wd, n, grad, from, to, v);
    if (o_.nesterov) {
      for (int64_t i = 0; i < n; ++i) {
        const float g = w * (grad[i] + wd * from[i]);
        v[i] = mu * v[i] + g;
        to[i] = from[i] - lr * (g + mu * v[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * from[i];
        v[i] = mu * v[i] + w * g;
        to[i] = from[i] - lr * v[i];
      }
    }
  }

 private:
  // The update in the served (lookahead) weights' terms (server/optimizer.h).
  void ApplyLookahead(float lr, float wd, int64_t n, const UnalignedFloat* __restrict grad, const float* from,
                      float* to, float* __restrict v) const {
    const float mu = mu_, w = weight_, back = lr * reach_, ahead = lr * (1 + reach_);
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * from[i];
      const float before = v[i];
      v[i] = mu * before + w * g;
      to[i] = from[i] + back * before - ahead * v[i];
    }
  }

  const OptimizerOptions o_;
  const float mu_, weight_, reach_;
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerOptions& o, bool decoupled) : o_(o), decoupled_(decoupled) {}
  int NumSlots() const override { return 2; }

  void Apply(const UpdateStep& at, int64_t n, const UnalignedFloat* __restrict grad, const float* from, float* to,
             float* const* slots) const override {
    const double lr = UpdateLr(o_, at);
    const double t = static_cast<double>(at.version + 1);  // updates, each with the per-update decays
    const double beta1 = PerUpdate(o_.beta1, o_.pushes_per_step), beta2 = PerUpdate(o_.beta2, o_.pushes_per_step);
    const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t)));
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, t)));
    const float eps = static_cast<float>(o_.epsilon);
    const float l2 = decoupled_ ? 0.0f : static_cast<float>(o_.weight_decay);
    const float shrink = decoupled_ ? static_cast<float>(1.0 - lr * o_.weight_decay) : 1.0f;
    float* __restrict m = slots[0];
    float* __restrict v = slots[1];
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i] + l2 * from[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      to[i] = from[i] * shrink - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
    }
  }

 private:
  const OptimizerOptions o_;
  const bool decoupled_;
};

class AdaGrad final : public Optimizer {
 public:
  explicit AdaGrad(const OptimizerOptions& o) : o_(o) {}
  int NumSlots() const override { return 1; }

  void Apply(const UpdateStep& at, int64_t n, const UnalignedFloat* __restrict grad, const float* from, float* to,
             float* const* slots) const override {
    const float lr = static_cast<float>(UpdateLr(o_, at));
    const float wd = static_cast<float>(o_.weight_decay);
    const float eps = static_cast<float>(o_.epsilon);
    const float share = 1.0f / static_cast<float>(o_.pushes_per_step);
    float* __restrict sum = slots[0];
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * from[i];
      sum[i] += share * g * g;
      to[i] = from[i] - lr * g / (std::sqrt(sum[i]) + eps);
    }
  }

 private:
  const OptimizerOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerOptions& options) {
  switch (options.kind) {
    case OptimizerKind::kSgd: return std::make_unique<Sgd>(options);
    case OptimizerKind::kAdam: return std::make_unique<Adam>(options, /*decoupled=*/false);
    case OptimizerKind::kAdamW: return std::make_unique<Adam>(options, /*decoupled=*/true);
    case OptimizerKind::kAdaGrad: return std::make_unique<AdaGrad>(options);
  }
  return nullptr;
}

}  // namespace shardps
