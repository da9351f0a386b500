// Bias add and its gradient, for dense rows and for convolution channels.
#ifndef SHARDPS_KERNELS_BIAS_H_
#define SHARDPS_KERNELS_BIAS_H_

#include <cuda_runtime_api.h>

namespace shardps {

// y[r, c] += bias[c] for a rows x cols matrix.
cudaError_t LaunchAddRowBias(cudaStream_t stream, int rows, int cols, const float* bias, float* y);
// db[c] = sum over r of dy[r, c].
cudaError_t LaunchRowBiasGrad(cudaStream_t stream, int rows, int cols, const float* dy, float* db);
// y[n, c, s] += bias[c].
cudaError_t LaunchAddChannelBias(cudaStream_t stream, int batch, int channels, int spatial, const float* bias,
                                 float* y);
// db[c] = sum over n, s of dy[n, c, s].
cudaError_t LaunchChannelBiasGrad(cudaStream_t stream, int batch, int channels, int spatial, const float* dy,
                                  float* db);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_BIAS_H_
