// 2x2 max pooling with stride 2 over channels-last (NHWC) images (h and w
// even: cudaErrorInvalidValue otherwise), and its backward.
#ifndef SHARDPS_KERNELS_MAX_POOL_H_
#define SHARDPS_KERNELS_MAX_POOL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// y[n, oy, ox, c] = the largest of its 2x2 window; argmax holds, per output,
// the chosen window position 2 * dy + dx (the first in that order on ties).
cudaError_t LaunchMaxPool2(cudaStream_t stream, int batch, int h, int w, int channels, const float* x, float* y,
                           int32_t* argmax);
// dx gets dy at each window's argmax and 0 elsewhere (overwritten).
cudaError_t LaunchMaxPool2Grad(cudaStream_t stream, int batch, int h, int w, int channels, const float* dy,
                               const int32_t* argmax, float* dx);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_MAX_POOL_H_
