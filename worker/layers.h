// The layers a model is built from: Dense, ReLU, Conv2D (3x3, same padding),
// MaxPool2D (2x2), Flatten, and SoftmaxCrossEntropy as the loss. Each layer
// knows its input shape from construction and keeps its own scratch memory on
// the backend. Not thread-safe; a model is used by one thread.
//
// Images between layers are channels-last (NHWC): a convolution is one
// im2col and one GEMM with no layout swaps, and its bias is a row bias.
// Flatten writes its values in NCHW order, so dense weights after it mean
// what they mean in PyTorch. Dense and Conv2D can fuse a following ReLU
// (bias + ReLU in one pass forward, ReLU's backward + the bias gradient in
// one pass backward).
#ifndef SHARDPS_WORKER_LAYERS_H_
#define SHARDPS_WORKER_LAYERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/backend.h"

namespace shardps {

// Per-sample shape, channels x height x width (a vector is c x 1 x 1); in
// memory a sample is h x w x c (channels-last).
struct Shape {
  int c = 1, h = 1, w = 1;
  int64_t Size() const { return static_cast<int64_t>(c) * h * w; }
};

struct ParamSpec {
  std::string name;  // "w" or "b"
  std::vector<int64_t> dims;
  int64_t fan_in = 1;  // for initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;
  virtual Shape output() const = 0;
  virtual std::vector<ParamSpec> Params() const { return {}; }
  // How many layers of the unfused model this layer stands for (2 with a
  // fused ReLU). Tensor names number layers by these positions, so a fused
  // model keeps its unfused twin's layout and checkpoints.
  virtual int positions() const { return 1; }
  // Allocates scratch for up to `max_batch` samples. Called once before use.
  virtual void Prepare(Backend& be, int max_batch) {}
  // y = layer(x). `params` has one backend pointer per Params() entry.
  virtual void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& params) = 0;
  // Sets grads (overwriting) and, when dx is not null, dx. REQUIRES: the
  // last Forward of this layer ran on the same batch (layers keep what
  // backward needs from it).
  virtual void Backward(Backend& be, int batch, const float* x, const float* y, const float* dy, float* dx,
                        const std::vector<float*>& params, const std::vector<float*>& grads) = 0;
};

enum class Activation { kNone, kRelu };

std::unique_ptr<Layer> MakeDense(Shape in, int out, Activation act = Activation::kNone);
std::unique_ptr<Layer> MakeRelu(Shape in);
std::unique_ptr<Layer> MakeConv2D(Shape in, int out_channels, int kernel, Activation act = Activation::kNone);
std::unique_ptr<Layer> MakeMaxPool2D(Shape in);
std::unique_ptr<Layer> MakeFlatten(Shape in);

}  // namespace shardps

#endif  // SHARDPS_WORKER_LAYERS_H_
