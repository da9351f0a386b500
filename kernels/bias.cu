#include "kernels/bias.h"
#include "kernels/launch_config.h"

#include <cstdint>

namespace shardps {
namespace {

// Sums a block's values; every thread gets the total. blockDim.x is
// kThreadsPerBlock, a power of two.
__device__ float BlockSum(float value) {
  __shared__ float partial[kThreadsPerBlock];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();
  return total;
}

__global__ void AddRowBiasKernel(int rows, int cols, const float* bias, float* y) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

// A block per group of 32 columns: threadIdx.x picks the column (coalesced
// reads along a row) and threadIdx.y strides over rows; then a fixed-order
// reduction over y, so the result is deterministic.
constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = kThreadsPerBlock / kColumnsPerBlock;

__global__ void RowBiasGradKernel(int rows, int cols, const float* dy, float* db) {
  __shared__ float partial[kRowLanes][kColumnsPerBlock];
  const int c = blockIdx.x * kColumnsPerBlock + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kRowLanes) sum += dy[static_cast<int64_t>(r) * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    db[c] = total;
  }
}

__global__ void AddChannelBiasKernel(int batch, int channels, int spatial, const float* bias, float* y) {
  const int64_t total = static_cast<int64_t>(batch) * channels * spatial;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[(i / spatial) % channels];
  }
}

// A block per channel sums batch x spatial values.
__global__ void ChannelBiasGradKernel(int batch, int channels, int spatial, const float* dy, float* db) {
  const int c = blockIdx.x;
  const int64_t count = static_cast<int64_t>(batch) * spatial;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t n = i / spatial, s = i % spatial;
    sum += dy[(n * channels + c) * spatial + s];
  }
  const float total = BlockSum(sum);
  if (threadIdx.x == 0) db[c] = total;
}

}  // namespace

cudaError_t LaunchAddRowBias(cudaStream_t stream, int rows, int cols, const float* bias, float* y) {
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (total <= 0) return cudaSuccess;
  AddRowBiasKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(rows, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t LaunchRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* dy, float* db) {
  if (cols <= 0) return cudaSuccess;
  const dim3 block(kColumnsPerBlock, kRowLanes);
  const unsigned blocks = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  RowBiasGradKernel<<<blocks, block, 0, stream>>>(rows, cols, dy, db);
  return cudaGetLastError();
}

cudaError_t LaunchAddChannelBias(cudaStream_t stream, int batch, int channels, int spatial, const float* bias,
                                 float* y) {
  const int64_t total = static_cast<int64_t>(batch) * channels * spatial;
  if (total <= 0) return cudaSuccess;
  AddChannelBiasKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(batch, channels, spatial, bias, y);
  return cudaGetLastError();
}

cudaError_t LaunchChannelBiasGrad(cudaStream_t stream, int batch, int channels, int spatial, const float* dy,
                                  float* db) {
  if (channels <= 0) return cudaSuccess;
  ChannelBiasGradKernel<<<channels, kThreadsPerBlock, 0, stream>>>(batch, channels, spatial, dy, db);
  return cudaGetLastError();
}

}  // namespace shardps
