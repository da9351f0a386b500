#include "kernels/launch_config.h"
#include "kernels/relu.h"

namespace shardps {
namespace {

__global__ void ReluKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluGradKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

}  // namespace

cudaError_t LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n <= 0) return cudaSuccess;
  ReluKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluGrad(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx) {
  if (n <= 0) return cudaSuccess;
  ReluGradKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

}  // namespace shardps
