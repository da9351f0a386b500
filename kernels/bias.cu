#include <algorithm>
#include <cstdint>

#include "kernels/bias.h"
#include "kernels/launch_config.h"

namespace shardps {
namespace {

template <bool kRelu>
__device__ float BiasThenRelu(float v, float b) {
  v += b;
  return kRelu ? (v > 0.0f ? v : 0.0f) : v;
}

// Column c of element i is tracked incrementally along the grid-stride loop
// (one division per thread, not per element).
template <bool kRelu>
__global__ void AddRowBiasKernel(int64_t total, int cols, const float* bias, float* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  int c = static_cast<int>(i % cols);
  const int step = static_cast<int>(stride % cols);
  for (; i < total; i += stride) {
    y[i] = BiasThenRelu<kRelu>(y[i], bias[c]);
    c += step;
    if (c >= cols) c -= cols;
  }
}

// Stage 1 of the bias gradient: block (x, y) sums rows [y * rows_per_block,
// ...) of columns [32x, 32x + 32): threadIdx.x picks the column (a warp reads
// 128 contiguous bytes of a row), threadIdx.y strides over rows; the lanes
// are then added in a fixed order into partial[y][c].
constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = kThreadsPerBlock / kColumnsPerBlock;

template <bool kRelu>
__global__ void RowBiasPartialKernel(int rows, int cols, int rows_per_block, const float* y, const float* dy,
                                     float* dz, float* partial) {
  __shared__ float lanes[kRowLanes][kColumnsPerBlock];
  const int c = blockIdx.x * kColumnsPerBlock + threadIdx.x;
  const int first = blockIdx.y * rows_per_block;
  const int end = min(rows, first + rows_per_block);
  float sum = 0.0f;
  if (c < cols) {
    for (int r = first + threadIdx.y; r < end; r += kRowLanes) {
      const int64_t i = static_cast<int64_t>(r) * cols + c;
      float g = dy[i];
      if (kRelu) {
        g = y[i] > 0.0f ? g : 0.0f;
        dz[i] = g;
      }
      sum += g;
    }
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += lanes[lane][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = total;
  }
}

// Stage 2: a block per column adds its row blocks' partial sums: each
// thread a fixed stride of them, then a fixed-order tree.
__global__ void SumPartialsKernel(int row_blocks, int cols, const float* partial, float* db) {
  __shared__ float sums[kThreadsPerBlock];
  const int c = blockIdx.x;
  float sum = 0.0f;
  for (int b = threadIdx.x; b < row_blocks; b += blockDim.x) sum += partial[static_cast<int64_t>(b) * cols + c];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = sums[0];
}

// Row blocks of the first stage: enough blocks to fill a large GPU (about a
// thousand in all), each at least 4 rows per thread.
int RowBlocks(int rows, int cols) {
  const int col_blocks = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  const int by_rows = (rows + 4 * kRowLanes - 1) / (4 * kRowLanes);
  return std::max(1, std::min(by_rows, std::max(1, 1024 / col_blocks)));
}

template <bool kRelu>
cudaError_t LaunchBiasGrad(cudaStream_t stream, int rows, int cols, const float* y, const float* dy, void* scratch,
                           float* dz, float* db) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) return cudaMemsetAsync(db, 0, sizeof(float) * cols, stream);
  const int row_blocks = RowBlocks(rows, cols);
  const int rows_per_block = (rows + row_blocks - 1) / row_blocks;
  float* partial = static_cast<float*>(scratch);
  const dim3 grid((cols + kColumnsPerBlock - 1) / kColumnsPerBlock, row_blocks);
  RowBiasPartialKernel<kRelu><<<grid, dim3(kColumnsPerBlock, kRowLanes), 0, stream>>>(rows, cols, rows_per_block, y,
                                                                                       dy, dz, partial);
  SumPartialsKernel<<<cols, kThreadsPerBlock, 0, stream>>>(row_blocks, cols, partial, db);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAddRowBias(cudaStream_t stream, int rows, int cols, const float* bias, bool relu, float* y) {
  if (static_cast<int64_t>(rows) * cols <= 0) return cudaSuccess;
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (relu) {
    AddRowBiasKernel<true><<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, cols, bias, y);
  } else {
    AddRowBiasKernel<false><<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, cols, bias, y);
  }
  return cudaGetLastError();
}

size_t RowBiasGradScratchBytes(int rows, int cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return sizeof(float) * static_cast<size_t>(RowBlocks(rows, cols)) * cols;
}

cudaError_t LaunchRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* dy, void* scratch, float* db) {
  return LaunchBiasGrad<false>(stream, rows, cols, nullptr, dy, scratch, nullptr, db);
}

cudaError_t LaunchReluRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* y, const float* dy,
                                  void* scratch, float* dz, float* db) {
  return LaunchBiasGrad<true>(stream, rows, cols, y, dy, scratch, dz, db);
}

}  // namespace shardps
