// CUDA and cuBLAS results as absl::Status. The one place where their error
// codes become statuses; a kernel launcher returns cudaError_t and its caller
// turns it into a Status here, naming what failed.
#ifndef SHARDPS_KERNELS_CUDA_STATUS_H_
#define SHARDPS_KERNELS_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace shardps {

// OK for cudaSuccess; otherwise "what: cudaErrorX (description)", with
// RESOURCE_EXHAUSTED for out-of-memory, UNAVAILABLE when there is no usable
// device or driver, and INTERNAL for the rest.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

}  // namespace shardps

#endif  // SHARDPS_KERNELS_CUDA_STATUS_H_
