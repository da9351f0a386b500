#include "kernels/cuda_context.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda_status.h"

namespace shardps {

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  if (absl::Status s = CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"); !s.ok()) return s;
  if (count == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA device");
  return count;
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device, bool tf32) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist; this machine has ",
                                                   *count, " (0..", *count - 1, ")"));
  }
  std::unique_ptr<CudaContext> ctx(new CudaContext());
  ctx->device_ = device;
  if (absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  cudaDeviceProp prop;
  if (absl::Status s = CudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"); !s.ok()) {
    return s;
  }
  ctx->device_name_ = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CublasStatus(cublasCreate(&ctx->cublas_), "cublasCreate"); !s.ok()) return s;
  if (absl::Status s = CublasStatus(cublasSetStream(ctx->cublas_, ctx->stream_), "cublasSetStream"); !s.ok()) {
    return s;
  }
  const cublasMath_t math = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  if (absl::Status s = CublasStatus(cublasSetMathMode(ctx->cublas_, math), "cublasSetMathMode"); !s.ok()) return s;
  if (absl::Status s = CudaStatus(cudaMallocHost(&ctx->pinned_, kPinnedBytes), "cudaMallocHost"); !s.ok()) return s;
  return ctx;
}

CudaContext::~CudaContext() {
  // Errors here cannot be acted on; the process is tearing the context down.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<void*> CudaContext::Workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  if (workspace_ != nullptr) {
    if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream_), "workspace: cudaStreamSynchronize"); !s.ok()) {
      return s;
    }
    cudaFree(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  if (absl::Status s = CudaStatus(cudaMalloc(&workspace_, rounded), absl::StrCat("workspace of ", rounded, " bytes"));
      !s.ok()) {
    return s;
  }
  workspace_bytes_ = rounded;
  return workspace_;
}

}  // namespace shardps
