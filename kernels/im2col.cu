#include <cstdint>

#include "kernels/fast_divmod.h"
#include "kernels/im2col.h"
#include "kernels/launch_config.h"

namespace shardps {
namespace {

// The shape's divisors, for index arithmetic without `/` (fast_divmod.h).
struct ImageShape {
  FastDivmod patch, kk, k, w, h, channels;
  int pad;
};

// One thread per column entry: consecutive threads write consecutive
// addresses (each warp one 128-byte stretch of a row); the reads gather from
// the image, which is small and stays in L2.
__global__ void Im2ColKernel(int total, ImageShape s, const float* images, float* col) {
  const int h = s.h.divisor(), w = s.w.divisor(), channels = s.channels.divisor();
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    uint32_t p, q, c, r, ky, kx, pw, x, n, y;
    s.patch.DivMod(e, p, q);
    s.kk.DivMod(q, c, r);
    s.k.DivMod(r, ky, kx);
    s.w.DivMod(p, pw, x);
    s.h.DivMod(pw, n, y);
    const int iy = static_cast<int>(y + ky) - s.pad, ix = static_cast<int>(x + kx) - s.pad;
    col[e] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? images[((n * h + iy) * w + ix) * channels + c] : 0.0f;
  }
}

// One thread per image element gathers its (at most k*k) column entries in
// (ky, kx) order: no atomics, and the CPU backend's order.
__global__ void Col2ImKernel(int total, ImageShape s, const float* col, float* images) {
  const int h = s.h.divisor(), w = s.w.divisor(), k = s.k.divisor();
  const int kk = s.kk.divisor(), patch = s.patch.divisor();
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    uint32_t p, c, pw, ix, n, iy;
    s.channels.DivMod(t, p, c);
    s.w.DivMod(p, pw, ix);
    s.h.DivMod(pw, n, iy);
    float sum = 0.0f;
    for (int ky = 0; ky < k; ++ky) {
      const int y = static_cast<int>(iy) - ky + s.pad;
      if (y < 0 || y >= h) continue;
      for (int kx = 0; kx < k; ++kx) {
        const int x = static_cast<int>(ix) - kx + s.pad;
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

ImageShape ShapeOf(int h, int w, int channels, int k, int pad) {
  return ImageShape{FastDivmod(channels * k * k), FastDivmod(k * k), FastDivmod(k), FastDivmod(w), FastDivmod(h),
                    FastDivmod(channels), pad};
}

}  // namespace

cudaError_t LaunchIm2Col(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* images, float* col) {
  if (batch <= 0 || h <= 0 || w <= 0 || channels <= 0 || k <= 0) return cudaSuccess;
  if (!Fits32(batch, h, w, channels, k)) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels * k * k;
  Im2ColKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, ShapeOf(h, w, channels, k, pad), images,
                                                                  col);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* col, float* images) {
  if (batch <= 0 || h <= 0 || w <= 0 || channels <= 0 || k <= 0) return cudaSuccess;
  if (!Fits32(batch, h, w, channels, k)) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels;
  Col2ImKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, ShapeOf(h, w, channels, k, pad), col,
                                                                  images);
  return cudaGetLastError();
}

}  // namespace shardps
