// The CUDA backend: the Backend interface on one GPU, with cuBLAS GEMMs and
// the kernels in kernels/, all queued on one stream of a CudaContext.
// CudaDeviceCount() (kernels/cuda_context.h) tells whether there is a GPU.
#ifndef SHARDPS_WORKER_CUDA_BACKEND_H_
#define SHARDPS_WORKER_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend.h"

namespace shardps {

// A backend on GPU `device`; `tf32` lets GEMMs use TF32 tensor cores.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int device, bool tf32);

}  // namespace shardps

#endif  // SHARDPS_WORKER_CUDA_BACKEND_H_
