#include <cmath>

#include "kernels/launch_config.h"
#include "kernels/softmax_cross_entropy.h"

namespace shardps {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// The larger of two (value, index) pairs; the lower index on ties, so the
// first maximum wins as in std::max_element.
__device__ void MaxWithIndex(float& value, int& index, float other_value, int other_index) {
  if (other_value > value || (other_value == value && other_index < index)) {
    value = other_value;
    index = other_index;
  }
}

__device__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// One warp per row: arg max, log-sum-exp, the row's loss, and the gradient.
__global__ void RowKernel(int rows, int classes, const float* logits, const int32_t* labels, float* dlogits,
                          float* row_loss, int32_t* row_correct) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // whole warps leave together
  const float* z = logits + static_cast<int64_t>(row) * classes;
  float* d = dlogits + static_cast<int64_t>(row) * classes;

  float zmax = -INFINITY;
  int arg = classes;
  for (int c = lane; c < classes; c += kWarp) MaxWithIndex(zmax, arg, z[c], c);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullMask, zmax, offset);
    const int other_arg = __shfl_xor_sync(kFullMask, arg, offset);
    MaxWithIndex(zmax, arg, other, other_arg);
  }
  float sum = 0.0f;
  for (int c = lane; c < classes; c += kWarp) sum += expf(z[c] - zmax);
  sum = WarpSum(sum);
  const float log_sum = logf(sum);
  const int label = labels[row];
  const bool valid = label >= 0 && label < classes;
  for (int c = lane; c < classes; c += kWarp) {
    const float p = expf(z[c] - zmax - log_sum);
    d[c] = (p - (c == label ? 1.0f : 0.0f)) / rows;
  }
  if (lane == 0) {
    row_loss[row] = valid ? log_sum - (z[label] - zmax) : NAN;
    row_correct[row] = arg == label ? 1 : 0;
  }
}

// One block sums the rows in a fixed order: the same loss on every run.
__global__ void TotalKernel(int rows, const float* row_loss, const int32_t* row_correct, float* loss,
                            int32_t* correct) {
  __shared__ float loss_part[kThreadsPerBlock];
  __shared__ int correct_part[kThreadsPerBlock];
  float l = 0.0f;
  int r = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    l += row_loss[i];
    r += row_correct[i];
  }
  loss_part[threadIdx.x] = l;
  correct_part[threadIdx.x] = r;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + stride];
      correct_part[threadIdx.x] += correct_part[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = loss_part[0] / rows;
    *correct = correct_part[0];
  }
}

}  // namespace

size_t SoftmaxCrossEntropyScratchBytes(int rows) {
  return static_cast<size_t>(rows) * (sizeof(float) + sizeof(int32_t));
}

cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int classes, const float* logits,
                                      const int32_t* labels, float* dlogits, void* scratch, float* loss,
                                      int32_t* correct) {
  if (rows <= 0 || classes <= 0) return cudaErrorInvalidValue;
  float* row_loss = static_cast<float*>(scratch);
  int32_t* row_correct = reinterpret_cast<int32_t*>(row_loss + rows);
  constexpr int kRowsPerBlock = kThreadsPerBlock / kWarp;
  RowKernel<<<(rows + kRowsPerBlock - 1) / kRowsPerBlock, kThreadsPerBlock, 0, stream>>>(
      rows, classes, logits, labels, dlogits, row_loss, row_correct);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  TotalKernel<<<1, kThreadsPerBlock, 0, stream>>>(rows, row_loss, row_correct, loss, correct);
  return cudaGetLastError();
}

}  // namespace shardps
