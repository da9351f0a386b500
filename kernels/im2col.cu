#include <cstdint>

#include "kernels/im2col.h"
#include "kernels/launch_config.h"

namespace shardps {
namespace {

// One thread per image element (pixel p, channel c) writes its k*k column
// entries. A warp spans consecutive channels of one pixel (or consecutive
// pixels when there is one channel), so its reads are coalesced; its writes
// fill one contiguous stretch of a column row.
__global__ void Im2ColKernel(int total, int h, int w, int channels, int k, int pad, const float* images,
                             float* col) {
  const int kk = k * k, patch = channels * kk;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int c = t % channels, p = t / channels;
    const int x = p % w, y = (p / w) % h, n = p / (w * h);
    const float* image = images + static_cast<int64_t>(n) * h * w * channels + c;
    float* out = col + static_cast<int64_t>(p) * patch + c * kk;
    for (int ky = 0; ky < k; ++ky) {
      const int iy = y + ky - pad;
      for (int kx = 0; kx < k; ++kx) {
        const int ix = x + kx - pad;
        out[ky * k + kx] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? image[(iy * w + ix) * channels] : 0.0f;
      }
    }
  }
}

// One thread per image element gathers its (at most k*k) column entries in
// (ky, kx) order: no atomics, and the CPU backend's order.
__global__ void Col2ImKernel(int total, int h, int w, int channels, int k, int pad, const float* col,
                             float* images) {
  const int kk = k * k, patch = channels * kk;
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const int c = t % channels, p = t / channels;
    const int ix = p % w, iy = (p / w) % h, n = p / (w * h);
    float sum = 0.0f;
    for (int ky = 0; ky < k; ++ky) {
      const int y = iy - ky + pad;
      if (y < 0 || y >= h) continue;
      for (int kx = 0; kx < k; ++kx) {
        const int x = ix - kx + pad;
        if (x < 0 || x >= w) continue;
        const int64_t row = (static_cast<int64_t>(n) * h + y) * w + x;
        sum += col[row * patch + c * kk + ky * k + kx];
      }
    }
    images[t] = sum;
  }
}

bool Fits32(int batch, int h, int w, int channels, int k) {
  return static_cast<int64_t>(batch) * h * w * channels * k * k < (int64_t{1} << 31);
}

}  // namespace

cudaError_t LaunchIm2Col(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* images, float* col) {
  if (!Fits32(batch, h, w, channels, k)) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels;
  if (total <= 0 || k <= 0) return cudaSuccess;
  Im2ColKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, h, w, channels, k, pad, images, col);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* col, float* images) {
  if (!Fits32(batch, h, w, channels, k)) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels;
  if (total <= 0 || k <= 0) return cudaSuccess;
  Col2ImKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, h, w, channels, k, pad, col, images);
  return cudaGetLastError();
}

}  // namespace shardps
