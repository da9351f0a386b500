// The compute backend a model runs on. Model code calls only this interface
// and never knows whether a CPU (OpenBLAS) or a GPU (CUDA, cuBLAS) does the
// work. Pointers passed to the compute calls are in the backend's memory
// (from Alloc); CopyIn/CopyOut move values to and from host memory.
//
// Shapes are row-major; images are channels-last (NHWC) inside a model. A
// backend is used by one thread.
//
// Compute calls may run asynchronously (the CUDA backend queues them on one
// stream); CopyOut, SoftmaxCrossEntropy and Synchronize wait for the work
// queued before them. A backend that fails (a CUDA error) records the first
// error in status(), skips every later call, and the caller checks status()
// at the end of each step: an error is reported, never a crash.
#ifndef SHARDPS_WORKER_BACKEND_H_
#define SHARDPS_WORKER_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace shardps {

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3 (sm_90))".
  virtual std::string name() const = 0;
  // OK, or the first error; after an error every call is skipped.
  virtual absl::Status status() const { return absl::OkStatus(); }

  // Backend memory. Alloc'd blocks are zeroed.
  virtual float* Alloc(int64_t n) = 0;
  virtual int32_t* AllocInts(int64_t n) = 0;
  virtual void Free(void* p) = 0;
  // Host memory that copies to and from the backend are fastest from
  // (pinned on CUDA), zeroed. Null on failure.
  virtual float* AllocHost(int64_t n) = 0;
  virtual void FreeHost(float* p) = 0;
  // `host` must stay unchanged until the next CopyOut or Synchronize.
  virtual void CopyIn(float* dst, const float* host, int64_t n) = 0;
  virtual void CopyInInts(int32_t* dst, const int32_t* host, int64_t n) = 0;
  virtual void CopyOut(float* host, const float* src, int64_t n) = 0;
  virtual void Fill(float* x, int64_t n, float value) = 0;
  // dst = src, both in backend memory.
  virtual void Copy(float* dst, const float* src, int64_t n) = 0;
  // Waits for all queued work (a no-op where calls are synchronous).
  virtual void Synchronize() = 0;

  // C[m,n] = alpha * op(A) * op(B) + beta * C; op transposes when asked.
  // A is m x k after op, B is k x n after op.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;

  // y[r, c] += bias[c] for a rows x cols matrix, then with `relu`
  // y = max(y, 0). Channels-last activations make a convolution's output
  // such a matrix (rows = batch * h * w, cols = channels).
  virtual void AddRowBias(int rows, int cols, const float* bias, bool relu, float* y) = 0;
  // db[c] = sum over r of dy[r, c].
  virtual void RowBiasGrad(int rows, int cols, const float* dy, float* db) = 0;
  // ReLU's backward and the bias gradient in one pass: dz = dy where y > 0,
  // else 0 (y is the ReLU's output); db[c] = sum over r of dz[r, c]. dz may
  // be dy.
  virtual void ReluRowBiasGrad(int rows, int cols, const float* y, const float* dy, float* dz, float* db) = 0;

  // y = max(x, 0); dx = dy where y > 0, else 0.
  virtual void Relu(int64_t n, const float* x, float* y) = 0;
  virtual void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) = 0;

  // A batch of channels-last images (batch x h x w x channels) to columns
  // (batch*h*w) x (channels*k*k) for a k x k convolution with stride 1 and
  // `pad` zero padding that keeps h x w: row (n, y, x), column (c, ky, kx)
  // holds image[n, y + ky - pad, x + kx - pad, c], 0 outside the image.
  virtual void Im2Col(int batch, int h, int w, int channels, int k, int pad, const float* images, float* col) = 0;
  // The adjoint: each image element gets the sum, in (ky, kx) order, of the
  // column entries taken from it. Overwrites `images`.
  virtual void Col2Im(int batch, int h, int w, int channels, int k, int pad, const float* col, float* images) = 0;
  // y[n][j][i] = x[n][i][j] for x of shape batch x rows x cols (NCHW <-> NHWC).
  virtual void TransposeBatched(int batch, int rows, int cols, const float* x, float* y) = 0;

  // 2x2 max pooling with stride 2 over channels-last images (h, w even);
  // argmax holds, per output, the window position 2 * dy + dx it took (the
  // first in that order on ties).
  virtual void MaxPool2(int batch, int h, int w, int channels, const float* x, float* y, int32_t* argmax) = 0;
  // dx gets dy at each argmax and 0 elsewhere (overwritten).
  virtual void MaxPool2Grad(int batch, int h, int w, int channels, const float* dy, const int32_t* argmax,
                            float* dx) = 0;

  // Softmax over each row of logits (rows x classes), the mean cross-entropy
  // against labels, dlogits = (softmax - onehot) / rows, and how many rows
  // have their label as the arg max. `loss` and `correct` are host values.
  virtual void SoftmaxCrossEntropy(int rows, int classes, const float* logits, const int32_t* labels,
                                   float* dlogits, float* loss, int* correct) = 0;
};

// Host memory from a backend's AllocHost, freed with it. Move-only.
class HostBuffer {
 public:
  HostBuffer(Backend& backend, int64_t n) : backend_(&backend), data_(backend.AllocHost(n)), size_(n) {}
  ~HostBuffer() {
    if (data_ != nullptr) backend_->FreeHost(data_);
  }
  HostBuffer(HostBuffer&& other) noexcept : backend_(other.backend_), data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer& operator=(HostBuffer&&) = delete;
  float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  Backend* backend_;
  float* data_;
  int64_t size_;
};

// The CPU backend on OpenBLAS with `threads` BLAS threads (0: OpenBLAS's choice).
std::unique_ptr<Backend> MakeCpuBackend(int threads);

}  // namespace shardps

#endif  // SHARDPS_WORKER_BACKEND_H_
