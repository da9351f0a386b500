#include "server/sparse/row_optimizer.h"

#include <cmath>

namespace shardps {

int RowSlotFloats(RowOptimizerKind kind, int dim) {
  switch (kind) {
    case RowOptimizerKind::kSgd:
      return 0;
    case RowOptimizerKind::kAdagrad:
      return dim;
    case RowOptimizerKind::kRowwiseAdagrad:
      return 1;
    case RowOptimizerKind::kLazyAdam:
      return 2 * dim + 1;
  }
  return 0;
}

namespace {

void Sgd(const RowOptimizerParams& p, float* row, const float* grad, float scale, float share) {
  const float step = p.lr * share * scale;
  for (int j = 0; j < p.dim; ++j) row[j] -= step * grad[j];
}

void Adagrad(const RowOptimizerParams& p, float* row, float* sum, const float* grad, float scale, float share) {
  const float lr = p.lr * share;
  for (int j = 0; j < p.dim; ++j) {
    const float g = grad[j] * scale;
    sum[j] += share * g * g;
    row[j] -= lr * g / (std::sqrt(sum[j]) + p.adagrad_eps);
  }
}

void RowwiseAdagrad(const RowOptimizerParams& p, float* row, float* acc, const float* grad, float scale,
                    float share) {
  float squares = 0;
  for (int j = 0; j < p.dim; ++j) squares += grad[j] * grad[j];
  *acc += share * squares * scale * scale / static_cast<float>(p.dim);
  const float step = p.lr * share * scale / (std::sqrt(*acc) + p.rowwise_eps);
  for (int j = 0; j < p.dim; ++j) row[j] -= step * grad[j];
}

void LazyAdam(const RowOptimizerParams& p, float* row, float* slots, const float* grad, float scale, float share) {
  float* m = slots;
  float* v = slots + p.dim;
  float& t = slots[2 * p.dim];
  t += 1;
  const float c1 = 1.0f - std::pow(p.beta1, t);
  const float c2 = 1.0f - std::pow(p.beta2, t);
  for (int j = 0; j < p.dim; ++j) {
    const float g = grad[j] * scale;
    m[j] = p.beta1 * m[j] + (1 - p.beta1) * g;
    v[j] = p.beta2 * v[j] + (1 - p.beta2) * g * g;
    row[j] -= p.lr * share * (m[j] / c1) / (std::sqrt(v[j] / c2) + p.adam_eps);
  }
}

}  // namespace

void ApplyRow(const RowOptimizerParams& p, float* row, float* slots, const float* grad, float grad_scale,
              float lr_share) {
  switch (p.kind) {
    case RowOptimizerKind::kSgd:
      return Sgd(p, row, grad, grad_scale, lr_share);
    case RowOptimizerKind::kAdagrad:
      return Adagrad(p, row, slots, grad, grad_scale, lr_share);
    case RowOptimizerKind::kRowwiseAdagrad:
      return RowwiseAdagrad(p, row, slots, grad, grad_scale, lr_share);
    case RowOptimizerKind::kLazyAdam:
      return LazyAdam(p, row, slots, grad, grad_scale, lr_share);
  }
}

}  // namespace shardps
