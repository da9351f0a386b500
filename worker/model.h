// A model: an ordered list of layers with a softmax cross-entropy loss, its
// parameters laid out as the job's Layout, and activation and gradient
// buffers on a Backend. Forward and backward run layer by layer so that the
// trainer can wait for one layer's weights and push one layer's gradients.
//
// Not thread-safe: one trainer thread drives it.
#ifndef SHARDPS_WORKER_MODEL_H_
#define SHARDPS_WORKER_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "worker/backend.h"
#include "worker/layers.h"

namespace shardps {

class Model {
 public:
  // "mlp" (784-256-128-10) or "cnn" (conv3x3x32, pool, conv3x3x64, pool,
  // dense 128, dense 10) on `input` images. `backend` must outlive the model.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const std::string& name, Backend* backend,
                                                       int max_batch, Shape input = {1, 28, 28},
                                                       int classes = 10);
  // A model from any layers (tests). The last layer's output is the logits.
  static std::unique_ptr<Model> FromLayers(std::vector<std::unique_ptr<Layer>> layers, Backend* backend,
                                           int max_batch, Shape input);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Layout& layout() const { return layout_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Indices into layout().tensors of layer l's parameters (may be empty).
  const std::vector<uint32_t>& TensorsOfLayer(int l) const { return tensors_of_layer_[l]; }
  // PyTorch's default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from `seed`.
  std::vector<std::vector<float>> InitialWeights(uint64_t seed) const;

  // Backend memory of tensor t's weights and of its gradient.
  float* weights(uint32_t t) { return weights_[t]; }
  float* grads(uint32_t t) { return grads_[t]; }
  Backend& backend() { return *backend_; }

  // Copies a batch (batch <= max_batch) of host images (NCHW, as datasets
  // hold them) and labels in; images become channels-last on the backend.
  void SetBatch(int batch, const float* images, const int32_t* labels);
  void ForwardLayer(int l);
  // After the last forward layer: mean loss and correct count of the batch;
  // sets the logits' gradient.
  void ComputeLoss(float* loss, int* correct);
  // After ComputeLoss and the backward of later layers: fills layer l's
  // gradients (grads()) and its input's gradient.
  void BackwardLayer(int l);

 private:
  Model(Backend* backend, int max_batch, Shape input) : backend_(backend), max_batch_(max_batch), input_(input) {}
  void Build(std::vector<std::unique_ptr<Layer>> layers);
  std::vector<float*> ParamsOf(int l, bool grads);
  // NCHW input differs from NHWC unless there is one channel or one pixel.
  bool InputNeedsTranspose() const { return input_.c > 1 && input_.h * input_.w > 1; }

  Backend* const backend_;
  const int max_batch_;
  const Shape input_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<ParamSpec> specs_;  // one per layout tensor
  Layout layout_;
  std::vector<std::vector<uint32_t>> tensors_of_layer_;
  std::vector<float*> weights_, grads_;
  std::vector<float*> acts_;   // acts_[0] input, acts_[l + 1] output of layer l
  std::vector<float*> dacts_;  // gradients of acts_
  int32_t* labels_ = nullptr;
  float* input_nchw_ = nullptr;  // staging of NCHW input, when it needs a transpose
  int batch_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_H_
