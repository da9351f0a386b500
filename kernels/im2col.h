// im2col and col2im for a whole batch of channels-last (NHWC) images, for
// k x k convolutions with stride 1 and `pad` zero padding that keeps h x w.
//
// Columns are (batch*h*w) x (channels*k*k): row (n, y, x), column
// (c, ky, kx) holds image[n, y + ky - pad, x + kx - pad, c] (0 outside). The
// column order is the weights' (out x channels x k x k), so one GEMM with
// the weights transposed gives the NHWC output of the whole batch, with no
// layout swaps before or after.
//
// The launchers return cudaErrorInvalidValue when the columns hold 2^31
// values or more (the kernels index in 32 bits).
#ifndef SHARDPS_KERNELS_IM2COL_H_
#define SHARDPS_KERNELS_IM2COL_H_

#include <cuda_runtime_api.h>

namespace shardps {

cudaError_t LaunchIm2Col(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* images, float* col);
// The adjoint: images[n, y, x, c] = the sum, in (ky, kx) order, of every
// column entry im2col copied from it. Overwrites `images`.
cudaError_t LaunchCol2Im(cudaStream_t stream, int batch, int h, int w, int channels, int k, int pad,
                         const float* col, float* images);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_IM2COL_H_
