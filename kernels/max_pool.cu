#include "kernels/launch_config.h"
#include "kernels/max_pool.h"

namespace shardps {
namespace {

__global__ void MaxPool2Kernel(int planes, int h, int w, const float* x, float* y, int32_t* argmax) {
  const int oh = h / 2, ow = w / 2;
  const int64_t total = static_cast<int64_t>(planes) * oh * ow;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = o / (oh * ow);
    const int oy = (o / ow) % oh, ox = o % ow;
    const float* in = x + plane * h * w;
    int best = (2 * oy) * w + 2 * ox;
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        const int i = (2 * oy + dy) * w + 2 * ox + dx;
        if (in[i] > in[best]) best = i;
      }
    }
    y[o] = in[best];
    argmax[o] = best;
  }
}

// Windows do not overlap and tile the plane, so each thread writes its
// window's four inputs and no input is written twice.
__global__ void MaxPool2GradKernel(int planes, int h, int w, const float* dy, const int32_t* argmax, float* dx) {
  const int oh = h / 2, ow = w / 2;
  const int64_t total = static_cast<int64_t>(planes) * oh * ow;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = o / (oh * ow);
    const int oy = (o / ow) % oh, ox = o % ow;
    float* out = dx + plane * h * w;
    for (int wy = 0; wy < 2; ++wy) {
      for (int wx = 0; wx < 2; ++wx) {
        const int i = (2 * oy + wy) * w + 2 * ox + wx;
        out[i] = i == argmax[o] ? dy[o] : 0.0f;
      }
    }
  }
}

}  // namespace

cudaError_t LaunchMaxPool2(cudaStream_t stream, int batch, int channels, int h, int w, const float* x, float* y,
                           int32_t* argmax) {
  const int planes = batch * channels;
  const int64_t total = static_cast<int64_t>(planes) * (h / 2) * (w / 2);
  if (total <= 0) return cudaSuccess;
  MaxPool2Kernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(planes, h, w, x, y, argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool2Grad(cudaStream_t stream, int batch, int channels, int h, int w, const float* dy,
                               const int32_t* argmax, float* dx) {
  const int planes = batch * channels;
  const int64_t total = static_cast<int64_t>(planes) * (h / 2) * (w / 2);
  if (total <= 0) return cudaSuccess;
  MaxPool2GradKernel<<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(planes, h, w, dy, argmax, dx);
  return cudaGetLastError();
}

}  // namespace shardps
