// ReLU and its gradient.
#ifndef SHARDPS_KERNELS_RELU_H_
#define SHARDPS_KERNELS_RELU_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// y = max(x, 0).
cudaError_t LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y);
// dx = dy where y > 0, else 0.
cudaError_t LaunchReluGrad(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_RELU_H_
