// 2x2 max pooling with stride 2 over NCHW (h and w even) and its backward.
#ifndef SHARDPS_KERNELS_MAX_POOL_H_
#define SHARDPS_KERNELS_MAX_POOL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// argmax holds, per output, the index of the chosen input inside its image
// plane; on ties the first in row-major order wins.
cudaError_t LaunchMaxPool2(cudaStream_t stream, int batch, int channels, int h, int w, const float* x, float* y,
                           int32_t* argmax);
// dx gets dy at each argmax and 0 elsewhere (overwritten).
cudaError_t LaunchMaxPool2Grad(cudaStream_t stream, int batch, int channels, int h, int w, const float* dy,
                               const int32_t* argmax, float* dx);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_MAX_POOL_H_
