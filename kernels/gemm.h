// Row-major FP32 GEMM through cuBLAS on a context's stream:
// C[m,n] = alpha * op(A) * op(B) + beta * C. cuBLAS is column-major, so the
// call computes C^T = op(B)^T op(A)^T, which is the same memory.
// TF32 tensor cores are used when the context was created with tf32.
#ifndef SHARDPS_KERNELS_GEMM_H_
#define SHARDPS_KERNELS_GEMM_H_

#include "absl/status/status.h"
#include "kernels/cuda_context.h"

namespace shardps {

absl::Status Gemm(CudaContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  const float* b, float beta, float* c);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_GEMM_H_
