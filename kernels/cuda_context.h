// The state one worker's GPU work runs in: the device, one stream, the cuBLAS
// handle bound to it, a device workspace that grows on demand and a small
// pinned host buffer for values the host reads back (the loss). No globals:
// every launcher takes its stream from a context.
#ifndef SHARDPS_KERNELS_CUDA_CONTEXT_H_
#define SHARDPS_KERNELS_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shardps {

// How many CUDA devices this process can use; an error (UNAVAILABLE with
// the driver's reason) where there is no GPU or no driver.
absl::StatusOr<int> CudaDeviceCount();

class CudaContext {
 public:
  // Binds the calling thread to `device` and creates the stream and cuBLAS
  // handle. `tf32` lets cuBLAS use TF32 tensor cores for FP32 GEMMs.
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int device, bool tf32);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  // "NVIDIA H100 80GB HBM3 (sm_90)".
  const std::string& device_name() const { return device_name_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  // At least `bytes` of device memory, valid until the next call (which may
  // reallocate after waiting for the stream).
  absl::StatusOr<void*> Workspace(size_t bytes);
  // kPinnedBytes of pinned host memory for small read-backs.
  static constexpr size_t kPinnedBytes = 256;
  void* pinned() const { return pinned_; }

 private:
  CudaContext() = default;
  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* pinned_ = nullptr;
};

}  // namespace shardps

#endif  // SHARDPS_KERNELS_CUDA_CONTEXT_H_
