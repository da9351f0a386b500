// Layout kernels: fill, and transposing each matrix of a batch (NCHW <->
// NHWC, and flattening channels-last activations in NCHW order).
#ifndef SHARDPS_KERNELS_TENSOR_OPS_H_
#define SHARDPS_KERNELS_TENSOR_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// x[i] = value for i < n.
cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x);
// y[n][j][i] = x[n][i][j] for x of shape batch x rows x cols.
cudaError_t LaunchTransposeBatched(cudaStream_t stream, int batch, int rows, int cols, const float* x, float* y);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_TENSOR_OPS_H_
