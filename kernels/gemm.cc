#include "kernels/gemm.h"

#include "kernels/cuda_status.h"

namespace shardps {

absl::Status Gemm(CudaContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  const int lda = trans_a ? m : k;  // row-major leading dimensions
  const int ldb = trans_b ? k : n;
  return CublasStatus(cublasSgemm(ctx.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  n, m, k, &alpha, b, ldb, a, lda, &beta, c, n),
                      "cublasSgemm");
}

}  // namespace shardps
