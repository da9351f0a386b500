#include <algorithm>
#include <cstdint>

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

// A 32 x 32 tile through shared memory (padded against bank conflicts):
// reads along x's rows and writes along y's rows are both coalesced.
constexpr int kTile = 32;
constexpr int kTileRows = 8;

__global__ void TransposeBatchedKernel(int batch, int rows, int cols, const float* x, float* y) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t plane = static_cast<int64_t>(rows) * cols;
  for (int n = blockIdx.z; n < batch; n += gridDim.z) {
    const float* in = x + n * plane;
    float* out = y + n * plane;
    const int j = blockIdx.x * kTile + threadIdx.x;
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const int i = blockIdx.y * kTile + r;
      if (i < rows && j < cols) tile[r][threadIdx.x] = in[static_cast<int64_t>(i) * cols + j];
    }
    __syncthreads();
    const int i = blockIdx.y * kTile + threadIdx.x;
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const int jj = blockIdx.x * kTile + r;
      if (jj < cols && i < rows) out[static_cast<int64_t>(jj) * rows + i] = tile[threadIdx.x][r];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, value, x);
  return cudaGetLastError();
}

cudaError_t LaunchTransposeBatched(cudaStream_t stream, int batch, int rows, int cols, const float* x, float* y) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile, std::min(batch, 65535));
  if (grid.y > 65535) return cudaErrorInvalidValue;
  TransposeBatchedKernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(batch, rows, cols, x, y);
  return cudaGetLastError();
}

}  // namespace shardps
