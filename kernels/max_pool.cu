#include <cstdint>

#include "kernels/fast_divmod.h"
#include "kernels/launch_config.h"
#include "kernels/max_pool.h"

namespace shardps {
namespace {

// One thread per output; a warp reads consecutive channels (coalesced).
__global__ void MaxPool2Kernel(int total, FastDivmod channels, FastDivmod ow, FastDivmod oh, int w, const float* x,
                               float* y, int32_t* argmax) {
  const int c_count = channels.divisor();
  for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
    uint32_t q, c, qw, ox, n, oy;
    channels.DivMod(o, q, c);
    ow.DivMod(q, qw, ox);
    oh.DivMod(qw, n, oy);
    const int64_t down = static_cast<int64_t>(w) * c_count;
    const float* window = x + ((static_cast<int64_t>(n) * 2 * oh.divisor() + 2 * oy) * w + 2 * ox) * c_count + c;
    const float v[4] = {window[0], window[c_count], window[down], window[down + c_count]};
    int best = 0;
    for (int i = 1; i < 4; ++i) {
      if (v[i] > v[best]) best = i;
    }
    y[o] = v[best];
    argmax[o] = best;
  }
}

// One thread per input: it takes its window's gradient when it was the
// window's argmax (windows tile the image without overlap).
__global__ void MaxPool2GradKernel(int total, FastDivmod channels, FastDivmod w, FastDivmod h, const float* dy,
                                   const int32_t* argmax, float* dx) {
  const uint32_t ow = w.divisor() / 2, oh = h.divisor() / 2, c_count = channels.divisor();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    uint32_t p, c, pw, ix, n, iy;
    channels.DivMod(i, p, c);
    w.DivMod(p, pw, ix);
    h.DivMod(pw, n, iy);
    const uint32_t o = ((n * oh + iy / 2) * ow + ix / 2) * c_count + c;
    dx[i] = argmax[o] == static_cast<int32_t>(2 * (iy % 2) + ix % 2) ? dy[o] : 0.0f;
  }
}

bool Fits32(int batch, int h, int w, int channels) {
  return static_cast<int64_t>(batch) * h * w * channels < (int64_t{1} << 31);
}

}  // namespace

cudaError_t LaunchMaxPool2(cudaStream_t stream, int batch, int h, int w, int channels, const float* x, float* y,
                           int32_t* argmax) {
  if (batch <= 0 || h < 2 || w < 2 || channels <= 0) return cudaSuccess;
  if (!Fits32(batch, h, w, channels) || h % 2 != 0 || w % 2 != 0) return cudaErrorInvalidValue;
  const int total = batch * (h / 2) * (w / 2) * channels;
  MaxPool2Kernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(
      total, FastDivmod(channels), FastDivmod(w / 2), FastDivmod(h / 2), w, x, y, argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool2Grad(cudaStream_t stream, int batch, int h, int w, int channels, const float* dy,
                               const int32_t* argmax, float* dx) {
  if (batch <= 0 || h < 2 || w < 2 || channels <= 0) return cudaSuccess;
  if (!Fits32(batch, h, w, channels) || h % 2 != 0 || w % 2 != 0) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels;
  MaxPool2GradKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, FastDivmod(channels), FastDivmod(w),
                                                                        FastDivmod(h), dy, argmax, dx);
  return cudaGetLastError();
}

}  // namespace shardps
