#include <cstdint>

#include "kernels/launch_config.h"
#include "kernels/max_pool.h"

namespace shardps {
namespace {

// One thread per output; a warp reads consecutive channels (coalesced).
__global__ void MaxPool2Kernel(int total, int h, int w, int channels, const float* x, float* y, int32_t* argmax) {
  const int oh = h / 2, ow = w / 2;
  for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
    const int c = o % channels, q = o / channels;
    const int ox = q % ow, oy = (q / ow) % oh, n = q / (ow * oh);
    const float* window = x + ((static_cast<int64_t>(n) * h + 2 * oy) * w + 2 * ox) * channels + c;
    const int64_t down = static_cast<int64_t>(w) * channels;
    const float v[4] = {window[0], window[channels], window[down], window[down + channels]};
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
__global__ void MaxPool2GradKernel(int total, int h, int w, int channels, const float* dy, const int32_t* argmax,
                                   float* dx) {
  const int oh = h / 2, ow = w / 2;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = i % channels, p = i / channels;
    const int ix = p % w, iy = (p / w) % h, n = p / (w * h);
    const int o = ((n * oh + iy / 2) * ow + ix / 2) * channels + c;
    dx[i] = argmax[o] == 2 * (iy % 2) + ix % 2 ? dy[o] : 0.0f;
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
  MaxPool2Kernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, h, w, channels, x, y, argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool2Grad(cudaStream_t stream, int batch, int h, int w, int channels, const float* dy,
                               const int32_t* argmax, float* dx) {
  if (batch <= 0 || h < 2 || w < 2 || channels <= 0) return cudaSuccess;
  if (!Fits32(batch, h, w, channels) || h % 2 != 0 || w % 2 != 0) return cudaErrorInvalidValue;
  const int total = batch * h * w * channels;
  MaxPool2GradKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(total, h, w, channels, dy, argmax, dx);
  return cudaGetLastError();
}

}  // namespace shardps
