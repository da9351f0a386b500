// Row optimizers of sparse tables: one update of one row from its gradient,
// with the row's optimizer slots stored right after it (server/sparse/
// sparse_table.h). Each touches only the row it is given, so a row that no
// push names stays as it is: lazy Adam's moments and step count advance
// only on the rows a push touches.
#ifndef SHARDPS_SERVER_SPARSE_ROW_OPTIMIZER_H_
#define SHARDPS_SERVER_SPARSE_ROW_OPTIMIZER_H_

#include <cstdint>

#include "common/table_spec.h"

namespace shardps {

// Floats of optimizer state per row of `dim`: SGD 0, AdaGrad dim,
// row-wise AdaGrad 1, lazy Adam 2 * dim + 1 (moments and the row's steps).
int RowSlotFloats(RowOptimizerKind kind, int dim);

struct RowOptimizerParams {
  RowOptimizerKind kind = RowOptimizerKind::kSgd;
  int dim = 0;
  float lr = 0.01f;
  // AdaGrad as torch.optim.Adagrad (eps 1e-10); row-wise as fbgemm's (1e-8);
  // Adam as torch.optim.Adam (0.9, 0.999, 1e-8).
  float adagrad_eps = 1e-10f;
  float rowwise_eps = 1e-8f;
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;
};

// row -= update(grad * grad_scale); `slots` holds RowSlotFloats() floats,
// zero for a new row. `lr_share`: this update's share of a step (async and
// ssp: 1 / num_workers, each push being one worker's part): it scales the
// learning rate and the squares AdaGrad accumulates, as the dense
// optimizers do (server/optimizer.cc): N pushes of one gradient leave
// AdaGrad's accumulator where one sync step of it would, each moving the
// row by 1/N of the learning rate's step.
void ApplyRow(const RowOptimizerParams& p, float* row, float* slots, const float* grad, float grad_scale,
              float lr_share = 1.0f);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SPARSE_ROW_OPTIMIZER_H_
