#include "worker/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/bias.h"
#include "kernels/cuda_context.h"
#include "kernels/cuda_status.h"
#include "kernels/gemm.h"
#include "kernels/im2col.h"
#include "kernels/max_pool.h"
#include "kernels/relu.h"
#include "kernels/softmax_cross_entropy.h"
#include "kernels/tensor_ops.h"

namespace shardps {
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::unique_ptr<CudaContext> ctx) : ctx_(std::move(ctx)) {}
  ~CudaBackend() override = default;

  std::string name() const override { return absl::StrCat("cuda:", ctx_->device(), " (", ctx_->device_name(), ")"); }
  absl::Status status() const override { return status_; }

  float* Alloc(int64_t n) override { return static_cast<float*>(AllocBytes(n * sizeof(float))); }
  int32_t* AllocInts(int64_t n) override { return static_cast<int32_t*>(AllocBytes(n * sizeof(int32_t))); }
  void Free(void* p) override {
    if (p != nullptr) Note(cudaFree(p), "cudaFree");
  }
  float* AllocHost(int64_t n) override {
    void* p = nullptr;
    const size_t bytes = std::max<int64_t>(n, 1) * sizeof(float);
    if (!Note(cudaMallocHost(&p, bytes), absl::StrCat("cudaMallocHost of ", bytes, " bytes"))) return nullptr;
    std::memset(p, 0, bytes);
    return static_cast<float*>(p);
  }
  void FreeHost(float* p) override {
    if (p != nullptr) Note(cudaFreeHost(p), "cudaFreeHost");
  }
  void CopyIn(float* dst, const float* host, int64_t n) override { CopyBytes(dst, host, n * 4, cudaMemcpyHostToDevice); }
  void CopyInInts(int32_t* dst, const int32_t* host, int64_t n) override {
    CopyBytes(dst, host, n * 4, cudaMemcpyHostToDevice);
  }
  void CopyOut(float* host, const float* src, int64_t n) override {
    CopyBytes(host, src, n * 4, cudaMemcpyDeviceToHost);
    Synchronize();
  }
  void Fill(float* x, int64_t n, float value) override {
    if (ok()) Note(LaunchFill(stream(), n, value, x), "fill");
  }
  void Copy(float* dst, const float* src, int64_t n) override { CopyBytes(dst, src, n * 4, cudaMemcpyDeviceToDevice); }
  void Synchronize() override {
    if (ok()) Note(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    if (ok()) Keep(shardps::Gemm(*ctx_, ta, tb, m, n, k, alpha, a, b, beta, c));
  }
  void AddRowBias(int rows, int cols, const float* bias, bool relu, float* y) override {
    if (ok()) Note(LaunchAddRowBias(stream(), rows, cols, bias, relu, y), relu ? "add row bias + relu" : "add row bias");
  }
  void RowBiasGrad(int rows, int cols, const float* dy, float* db) override {
    void* scratch = Scratch(RowBiasGradScratchBytes(rows, cols));
    if (ok()) Note(LaunchRowBiasGrad(stream(), rows, cols, dy, scratch, db), "row bias gradient");
  }
  void ReluRowBiasGrad(int rows, int cols, const float* y, const float* dy, float* dz, float* db) override {
    void* scratch = Scratch(RowBiasGradScratchBytes(rows, cols));
    if (ok()) Note(LaunchReluRowBiasGrad(stream(), rows, cols, y, dy, scratch, dz, db), "relu + row bias gradient");
  }
  void Relu(int64_t n, const float* x, float* y) override {
    if (ok()) Note(LaunchRelu(stream(), n, x, y), "relu");
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    if (ok()) Note(LaunchReluGrad(stream(), n, y, dy, dx), "relu gradient");
  }
  void Im2Col(int batch, int h, int w, int channels, int k, int pad, const float* images, float* col) override {
    if (ok()) Note(LaunchIm2Col(stream(), batch, h, w, channels, k, pad, images, col), "im2col");
  }
  void Col2Im(int batch, int h, int w, int channels, int k, int pad, const float* col, float* images) override {
    if (ok()) Note(LaunchCol2Im(stream(), batch, h, w, channels, k, pad, col, images), "col2im");
  }
  void TransposeBatched(int batch, int rows, int cols, const float* x, float* y) override {
    if (ok()) Note(LaunchTransposeBatched(stream(), batch, rows, cols, x, y), "batched transpose");
  }
  void MaxPool2(int batch, int h, int w, int channels, const float* x, float* y, int32_t* argmax) override {
    if (ok()) Note(LaunchMaxPool2(stream(), batch, h, w, channels, x, y, argmax), "max pool");
  }
  void MaxPool2Grad(int batch, int h, int w, int channels, const float* dy, const int32_t* argmax,
                    float* dx) override {
    if (ok()) Note(LaunchMaxPool2Grad(stream(), batch, h, w, channels, dy, argmax, dx), "max pool gradient");
  }

  // The loss and count travel through the context's pinned buffer: the one
  // point of a step where the host waits for the GPU.
  void SoftmaxCrossEntropy(int rows, int classes, const float* logits, const int32_t* labels, float* dlogits,
                           float* loss, int* correct) override {
    *loss = 0;
    *correct = 0;
    if (!ok()) return;
    constexpr size_t kResultBytes = 256;  // keeps the per-row scratch aligned
    absl::StatusOr<void*> scratch = ctx_->Workspace(kResultBytes + SoftmaxCrossEntropyScratchBytes(rows));
    if (!Keep(scratch.status())) return;
    auto* result = static_cast<char*>(*scratch);
    float* device_loss = reinterpret_cast<float*>(result);
    int32_t* device_correct = reinterpret_cast<int32_t*>(result + sizeof(float));
    if (!Note(LaunchSoftmaxCrossEntropy(stream(), rows, classes, logits, labels, dlogits, result + kResultBytes,
                                        device_loss, device_correct),
              "softmax cross-entropy")) {
      return;
    }
    auto* host = static_cast<char*>(ctx_->pinned());
    if (!Note(cudaMemcpyAsync(host, result, sizeof(float) + sizeof(int32_t), cudaMemcpyDeviceToHost, stream()),
              "loss read-back")) {
      return;
    }
    Synchronize();
    if (!ok()) return;
    std::memcpy(loss, host, sizeof(float));
    int32_t right;
    std::memcpy(&right, host + sizeof(float), sizeof(int32_t));
    *correct = right;
  }

 private:
  cudaStream_t stream() const { return ctx_->stream(); }
  bool ok() const { return status_.ok(); }
  // Records the first error; true when `s` is OK.
  bool Keep(const absl::Status& s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s.ok();
  }
  bool Note(cudaError_t e, const std::string& what) { return e == cudaSuccess || Keep(CudaStatus(e, what)); }

  // The context's workspace, at least `bytes` (null after an error).
  void* Scratch(size_t bytes) {
    if (!ok()) return nullptr;
    absl::StatusOr<void*> scratch = ctx_->Workspace(std::max<size_t>(bytes, 4));
    return Keep(scratch.status()) ? *scratch : nullptr;
  }
  void* AllocBytes(int64_t bytes) {
    if (!ok()) return nullptr;
    void* p = nullptr;
    bytes = std::max<int64_t>(bytes, 4);
    if (!Note(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc of ", bytes, " bytes"))) return nullptr;
    if (!Note(cudaMemsetAsync(p, 0, bytes, stream()), "cudaMemsetAsync")) return nullptr;
    return p;
  }
  void CopyBytes(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind) {
    if (ok() && bytes > 0) Note(cudaMemcpyAsync(dst, src, bytes, kind, stream()), "cudaMemcpyAsync");
  }

  std::unique_ptr<CudaContext> ctx_;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int device, bool tf32) {
  absl::StatusOr<std::unique_ptr<CudaContext>> ctx = CudaContext::Create(device, tf32);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(std::move(*ctx)));
}

}  // namespace shardps
