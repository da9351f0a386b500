#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "server/optimizer.h"

namespace shardps {
namespace {

using Catch::Matchers::WithinAbs;

// Runs `steps` optimizer steps of one value with gradients `grads`.
std::vector<double> Run(const OptimizerOptions& o, double w0, const std::vector<float>& grads) {
  auto opt = MakeOptimizer(o);
  float w = static_cast<float>(w0);
  std::vector<std::vector<float>> slots(opt->NumSlots(), std::vector<float>(1, 0.0f));
  std::vector<float*> slot_ptrs;
  for (auto& s : slots) slot_ptrs.push_back(s.data());
  std::vector<double> out;
  for (size_t t = 0; t < grads.size(); ++t) {
    opt->Apply(UpdateStep{static_cast<int64_t>(t)}, 1, &grads[t], &w, &w, slot_ptrs.data());
    out.push_back(w);
  }
  return out;
}

TEST_CASE("sgd matches hand-computed values", "[optimizer]") {
  OptimizerOptions o;
  o.lr = 0.1;
  // Plain: w = 1 - 0.1*1 - 0.1*2 - 0.1*3.
  auto plain = Run(o, 1.0, {1, 2, 3});
  REQUIRE_THAT(plain[2], WithinAbs(0.4, 1e-6));
  // Momentum 0.9, g = 1: v = 1, 1.9, 2.71; w = 0.9, 0.71, 0.439.
  o.momentum = 0.9;
  auto momentum = Run(o, 1.0, {1, 1, 1});
  REQUIRE_THAT(momentum[0], WithinAbs(0.9, 1e-6));
  REQUIRE_THAT(momentum[1], WithinAbs(0.71, 1e-6));
  REQUIRE_THAT(momentum[2], WithinAbs(0.439, 1e-6));
  // Nesterov: step uses g + mu*v: 1 + 0.9*1 = 1.9 -> w = 0.81; v = 1.9, g+mu*v = 2.71 -> 0.539.
  o.nesterov = true;
  auto nesterov = Run(o, 1.0, {1, 1});
  REQUIRE_THAT(nesterov[0], WithinAbs(0.81, 1e-6));
  REQUIRE_THAT(nesterov[1], WithinAbs(0.539, 1e-6));
  // Weight decay 0.5 (L2): g' = g + 0.5 w = 0 + 0.5 -> w = 1 - 0.05 = 0.95.
  OptimizerOptions wd;
  wd.lr = 0.1;
  wd.weight_decay = 0.5;
  REQUIRE_THAT(Run(wd, 1.0, {0})[0], WithinAbs(0.95, 1e-6));
}

TEST_CASE("adam and adamw match a double-precision reference", "[optimizer]") {
  const std::vector<float> grads = {0.5f, -1.0f, 2.0f, 0.25f};
  for (bool decoupled : {false, true}) {
    OptimizerOptions o;
    o.kind = decoupled ? OptimizerKind::kAdamW : OptimizerKind::kAdam;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    auto got = Run(o, 1.0, grads);
    double w = 1, m = 0, v = 0;
    for (size_t t = 0; t < grads.size(); ++t) {
      double g = grads[t];
      if (decoupled) {
        w *= 1 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * w;
      }
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double mhat = m / (1 - std::pow(0.9, t + 1));
      const double vhat = v / (1 - std::pow(0.999, t + 1));
      w -= o.lr * mhat / (std::sqrt(vhat) + o.epsilon);
      REQUIRE_THAT(got[t], WithinAbs(w, 1e-6));
    }
  }
  // First Adam step moves by lr whatever the gradient's size.
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.lr = 0.01;
  REQUIRE_THAT(Run(o, 1.0, {123.0f})[0], WithinAbs(0.99, 1e-6));
}

TEST_CASE("adagrad matches hand-computed values", "[optimizer]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdaGrad;
  o.lr = 0.1;
  o.epsilon = 1e-10;
  // g = 3: sum = 9, w = 1 - 0.1*3/3 = 0.9; g = 4: sum = 25, w = 0.9 - 0.1*4/5 = 0.82.
  auto got = Run(o, 1.0, {3, 4});
  REQUIRE_THAT(got[0], WithinAbs(0.9, 1e-6));
  REQUIRE_THAT(got[1], WithinAbs(0.82, 1e-6));
}

TEST_CASE("learning-rate schedules", "[optimizer]") {
  LrSchedule s;
  REQUIRE(LearningRateAt(s, 0.5, 1000) == 0.5);
  s.kind = LrScheduleKind::kStep;
  s.step_size = 10;
  s.gamma = 0.5;
  REQUIRE_THAT(LearningRateAt(s, 1.0, 9), WithinAbs(1.0, 1e-12));
  REQUIRE_THAT(LearningRateAt(s, 1.0, 25), WithinAbs(0.25, 1e-12));
  s.kind = LrScheduleKind::kCosine;
  s.total_steps = 100;
  s.min_lr = 0.1;
  REQUIRE_THAT(LearningRateAt(s, 1.0, 0), WithinAbs(1.0, 1e-12));
  REQUIRE_THAT(LearningRateAt(s, 1.0, 50), WithinAbs(0.55, 1e-12));
  REQUIRE_THAT(LearningRateAt(s, 1.0, 500), WithinAbs(0.1, 1e-12));
  s.kind = LrScheduleKind::kConstant;
  s.warmup_steps = 4;
  REQUIRE_THAT(LearningRateAt(s, 1.0, 0), WithinAbs(0.25, 1e-12));
  REQUIRE_THAT(LearningRateAt(s, 1.0, 3), WithinAbs(1.0, 1e-12));
  // The schedule reaches the optimizer: SGD with warm-up takes a quarter step first.
  OptimizerOptions o;
  o.lr = 1.0;
  o.schedule = s;
  REQUIRE_THAT(Run(o, 0.0, {1})[0], WithinAbs(-0.25, 1e-7));
}

TEST_CASE("every optimizer gives the same weights in place and into another array", "[optimizer]") {
  // The server updates in place, or, when a pull still holds the weights,
  // from them into a spare array: both must be the same step.
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW, OptimizerKind::kAdaGrad}) {
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 0.01;
    o.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
    o.weight_decay = 0.01;
    auto opt = MakeOptimizer(o);
    const int64_t n = 1027;  // not a multiple of any vector width
    std::vector<float> grad(n), in_place(n), from(n), to(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) {
      grad[i] = std::sin(0.1f * i);
      in_place[i] = from[i] = std::cos(0.05f * i);
    }
    std::vector<std::vector<float>> slots_a(opt->NumSlots(), std::vector<float>(n)), slots_b = slots_a;
    std::vector<float*> a, b;
    for (auto& v : slots_a) a.push_back(v.data());
    for (auto& v : slots_b) b.push_back(v.data());
    for (int64_t step = 0; step < 3; ++step) {
      opt->Apply(UpdateStep{step}, n, grad.data(), in_place.data(), in_place.data(), a.data());
      opt->Apply(UpdateStep{step}, n, grad.data(), from.data(), to.data(), b.data());
      from.swap(to);
    }
    INFO(OptimizerName(kind));
    CHECK(from == in_place);
    CHECK(slots_a == slots_b);
    CHECK(from[0] != std::cos(0.0f));  // the steps moved the weights
  }
}

TEST_CASE("a step of N updates: lr / N each, the schedule once per N updates", "[optimizer]") {
  OptimizerOptions o;
  o.lr = 1.0;
  o.pushes_per_step = 4;
  REQUIRE(Run(o, 0.0, {4})[0] == -1.0f);  // lr / 4 on a gradient of 4
  // Step schedule halving every step, 2 updates a step: 1/2, 1/2, 1/4, 1/4 of the gradient.
  o.pushes_per_step = 2;
  o.schedule.kind = LrScheduleKind::kStep;
  o.schedule.step_size = 1;
  o.schedule.gamma = 0.5;
  REQUIRE(Run(o, 0.0, {4, 4, 4, 4}) == std::vector<double>{-2, -4, -5, -6});
  // A stale update's factor multiplies its learning rate.
  auto opt = MakeOptimizer(o);
  float w = 0;
  const float g = 8;
  opt->Apply(UpdateStep{0, 0.25}, 1, &g, &w, &w, nullptr);
  REQUIRE(w == -1.0f);  // 8 * (1 / 2) * 0.25
}

// Weights after `updates` updates of one value, all with gradient g.
double Constant(OptimizerOptions o, int updates, float g) {
  return Run(o, 0.0, std::vector<float>(updates, g)).back();
}

TEST_CASE("N updates of a gradient move the weights as one step of it does, for every optimizer", "[optimizer]") {
  // Over many steps, the momentum, Adam's moments and AdaGrad's sums reach
  // the same state whether a step is one update or four.
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdaGrad}) {
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 0.01;
    o.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
    const double one = Constant(o, 400, 0.5f);
    o.pushes_per_step = 4;
    const double four = Constant(o, 1600, 0.5f);
    INFO(OptimizerName(kind) << ": " << one << " after 400 steps, " << four << " after 400 steps of 4 updates");
    REQUIRE_THAT(four, WithinAbs(one, 0.02 * std::abs(one)));
  }
  // Without the scaling, four updates a step would move four times as far.
  OptimizerOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  REQUIRE(std::abs(Constant(o, 1600, 0.5f)) > 3.5 * std::abs(Constant(o, 400, 0.5f)));
}

TEST_CASE("optimizer options out of range are refused", "[optimizer]") {
  OptimizerOptions o;
  o.lr = 0;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  o.lr = 0.1;
  o.nesterov = true;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(!ParseOptimizer("rmsprop").ok());
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

// Momentum lookahead (server/optimizer.h): the served weights are
// u = w - lr * s * v. With momentum 0.5 per update and L = 2, s = 0.5 + 0.25:
// every value below is exact in float.
TEST_CASE("momentum lookahead serves where the momentum leads, exactly", "[optimizer][lookahead]") {
  OptimizerOptions o;
  o.lr = 1.0;
  o.momentum = 0.5;
  o.lookahead_updates = 2;
  // v = 2, 3, 1.5; plain momentum's w = -2, -5, -6.5; u = w - 0.75 v.
  const std::vector<double> u = Run(o, 0.0, {2, 2, 0});
  REQUIRE(u[0] == -2.0 - 0.75 * 2);
  REQUIRE(u[1] == -5.0 - 0.75 * 3);
  REQUIRE(u[2] == -6.5 - 0.75 * 1.5);
  // L = 0 is plain momentum, bit for bit.
  o.lookahead_updates = 0;
  REQUIRE(Run(o, 0.0, {2, 2, 0}) == std::vector<double>{-2.0, -5.0, -6.5});
}

TEST_CASE("momentum lookahead: a fractional L and N updates a step", "[optimizer][lookahead]") {
  OptimizerOptions o;
  o.lr = 0.4;
  o.momentum = 0.81;
  o.pushes_per_step = 2;  // per update: decay 0.9, gradient weight 0.1 / 0.19, lr 0.2
  o.lookahead_updates = 1.5;
  const double mu = 0.9, weight = 0.1 / 0.19, lr = 0.2;
  const double s = mu * (1 - std::pow(mu, 1.5)) / (1 - mu);
  double w = 1, v = 0;
  const std::vector<float> grads = {1, -2, 0.5f};
  const std::vector<double> got = Run(o, 1.0, grads);
  for (size_t t = 0; t < grads.size(); ++t) {
    v = mu * v + weight * grads[t];
    w -= lr * v;
    REQUIRE_THAT(got[t], WithinAbs(w - lr * s * v, 1e-6));
  }
}

TEST_CASE("momentum lookahead is refused where it has no momentum to follow", "[optimizer][lookahead]") {
  OptimizerOptions o;
  o.lookahead_updates = 3;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);  // momentum 0
  o.momentum = 0.9;
  REQUIRE(ValidateOptimizerOptions(o).ok());
  o.nesterov = true;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  o.nesterov = false;
  o.kind = OptimizerKind::kAdam;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  o.kind = OptimizerKind::kSgd;
  o.lookahead_updates = -1;
  REQUIRE(ValidateOptimizerOptions(o).message().find("momentum_lookahead") != std::string::npos);
}

}  // namespace
}  // namespace shardps
