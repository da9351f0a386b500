// Bias add (optionally fused with ReLU) and the bias gradient (optionally
// fused with ReLU's backward), over the rows of a rows x cols matrix. With
// channels-last (NHWC) activations a convolution's output is such a matrix
// too (rows = batch * h * w, cols = channels), so one set of kernels serves
// dense and convolution layers.
#ifndef SHARDPS_KERNELS_BIAS_H_
#define SHARDPS_KERNELS_BIAS_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace shardps {

// y[r, c] += bias[c]; with `relu`, then y = max(y, 0).
cudaError_t LaunchAddRowBias(cudaStream_t stream, int rows, int cols, const float* bias, bool relu, float* y);

// Device scratch (bytes) the gradient launchers need for this shape.
size_t RowBiasGradScratchBytes(int rows, int cols);

// db[c] = sum over r of dy[r, c]. A two-stage reduction (blocks of rows,
// then the blocks' partial sums in a fixed order): deterministic.
// `scratch` holds RowBiasGradScratchBytes(rows, cols).
cudaError_t LaunchRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* dy, void* scratch, float* db);

// ReLU's backward fused with the bias gradient: dz = dy where y > 0, else 0;
// db[c] = sum over r of dz[r, c]. dz may alias dy.
cudaError_t LaunchReluRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* y, const float* dy,
                                  void* scratch, float* dz, float* db);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_BIAS_H_
