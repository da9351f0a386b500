#include "kernels/launch_config.h"
#include "kernels/tensor_ops.h"

namespace shardps {
namespace {

__global__ void FillKernel(int64_t n, float value, float* x) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

// One thread per output element; reads are coalesced along `inner`.
__global__ void SwapLeadingAxesKernel(int a, int b, int inner, const float* x, float* y) {
  const int64_t total = static_cast<int64_t>(a) * b * inner;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = o % inner;
    const int64_t i = (o / inner) % a;
    const int64_t j = o / (static_cast<int64_t>(inner) * a);
    y[o] = x[(i * b + j) * inner + s];
  }
}

}  // namespace

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, value, x);
  return cudaGetLastError();
}

cudaError_t LaunchSwapLeadingAxes(cudaStream_t stream, int a, int b, int inner, const float* x, float* y) {
  const int64_t total = static_cast<int64_t>(a) * b * inner;
  if (total <= 0) return cudaSuccess;
  SwapLeadingAxesKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(a, b, inner, x, y);
  return cudaGetLastError();
}

}  // namespace shardps
