// im2col and col2im for a whole batch, for k x k convolutions with stride 1
// and `pad` zero padding that keeps h x w.
//
// Columns are (channels*k*k) x (batch*h*w): row (c, ky, kx), column
// (n, y, x) holds image[n, c, y + ky - pad, x + kx - pad] (0 outside). One
// GEMM with the (out x channels*k*k) weights then convolves the whole batch.
#ifndef SHARDPS_KERNELS_IM2COL_H_
#define SHARDPS_KERNELS_IM2COL_H_

#include <cuda_runtime_api.h>

namespace shardps {

cudaError_t LaunchIm2Col(cudaStream_t stream, int batch, int channels, int h, int w, int k, int pad,
                         const float* images, float* col);
// The adjoint: images[n, c, y, x] = the sum of every column entry that
// im2col copied from it. Overwrites `images`.
cudaError_t LaunchCol2Im(cudaStream_t stream, int batch, int channels, int h, int w, int k, int pad,
                         const float* col, float* images);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_IM2COL_H_
