// Layout kernels: fill, and swapping the two leading axes of a 3-d tensor.
#ifndef SHARDPS_KERNELS_TENSOR_OPS_H_
#define SHARDPS_KERNELS_TENSOR_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// x[i] = value for i < n.
cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x);
// y[j][i][s] = x[i][j][s] for x of shape a x b x inner.
cudaError_t LaunchSwapLeadingAxes(cudaStream_t stream, int a, int b, int inner, const float* x, float* y);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_TENSOR_OPS_H_
