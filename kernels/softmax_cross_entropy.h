// Softmax cross-entropy over the rows of logits (rows x classes), and its
// gradient with respect to the logits.
#ifndef SHARDPS_KERNELS_SOFTMAX_CROSS_ENTROPY_H_
#define SHARDPS_KERNELS_SOFTMAX_CROSS_ENTROPY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardps {

// Device scratch the launcher needs for `rows` rows.
size_t SoftmaxCrossEntropyScratchBytes(int rows);

// dlogits = (softmax - onehot(label)) / rows; *loss (device) = mean over rows
// of -log softmax[label]; *correct (device) = rows whose arg max (first on
// ties) is the label. A label outside [0, classes) makes the loss NaN.
cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int classes, const float* logits,
                                      const int32_t* labels, float* dlogits, void* scratch, float* loss,
                                      int32_t* correct);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_SOFTMAX_CROSS_ENTROPY_H_
