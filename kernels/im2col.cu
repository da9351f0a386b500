#include <cstdint>

#include "kernels/im2col.h"
#include "kernels/launch_config.h"

namespace shardps {
namespace {

// One thread per column entry; consecutive threads write consecutive (n, y, x).
__global__ void Im2ColKernel(int batch, int channels, int h, int w, int k, int pad, const float* images,
                             float* col) {
  const int64_t spatial = static_cast<int64_t>(h) * w;
  const int64_t width = batch * spatial;
  const int64_t total = static_cast<int64_t>(channels) * k * k * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % width, row = i / width;
    const int kx = row % k, ky = (row / k) % k;
    const int64_t c = row / (k * k);
    const int64_t n = j / spatial;
    const int y = (j % spatial) / w, x = j % w;
    const int iy = y + ky - pad, ix = x + kx - pad;
    col[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? images[((n * channels + c) * h + iy) * w + ix] : 0.0f;
  }
}

// One thread per image element gathers its (at most k*k) column entries:
// no atomics, and a fixed summation order.
__global__ void Col2ImKernel(int batch, int channels, int h, int w, int k, int pad, const float* col,
                             float* images) {
  const int64_t spatial = static_cast<int64_t>(h) * w;
  const int64_t width = batch * spatial;
  const int64_t total = static_cast<int64_t>(batch) * channels * spatial;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int ix = i % w, iy = (i / w) % h;
    const int64_t c = (i / spatial) % channels, n = i / (spatial * channels);
    float sum = 0.0f;
    for (int ky = 0; ky < k; ++ky) {
      const int y = iy - ky + pad;
      if (y < 0 || y >= h) continue;
      for (int kx = 0; kx < k; ++kx) {
        const int x = ix - kx + pad;
        if (x < 0 || x >= w) continue;
        const int64_t row = (c * k + ky) * k + kx;
        sum += col[row * width + n * spatial + static_cast<int64_t>(y) * w + x];
      }
    }
    images[i] = sum;
  }
}

}  // namespace

cudaError_t LaunchIm2Col(cudaStream_t stream, int batch, int channels, int h, int w, int k, int pad,
                         const float* images, float* col) {
  const int64_t total = static_cast<int64_t>(channels) * k * k * batch * h * w;
  if (total <= 0) return cudaSuccess;
  Im2ColKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(batch, channels, h, w, k, pad, images, col);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, int batch, int channels, int h, int w, int k, int pad,
                         const float* col, float* images) {
  const int64_t total = static_cast<int64_t>(batch) * channels * h * w;
  if (total <= 0) return cudaSuccess;
  Col2ImKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(batch, channels, h, w, k, pad, col, images);
  return cudaGetLastError();
}

}  // namespace shardps
