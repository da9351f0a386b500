#include "worker/model.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const std::string& name, Backend* backend, int max_batch,
                                                     Shape input, int classes) {
  std::vector<std::unique_ptr<Layer>> layers;
  auto add = [&](std::unique_ptr<Layer> layer) {
    layers.push_back(std::move(layer));
    return layers.back()->output();
  };
  // Each ReLU is fused into the layer before it; tensor names keep the
  // unfused positions (layers.h, positions()).
  constexpr Activation kRelu = Activation::kRelu;
  if (name == "mlp") {
    Shape s = add(MakeFlatten(input));
    s = add(MakeDense(s, 256, kRelu));
    s = add(MakeDense(s, 128, kRelu));
    add(MakeDense(s, classes));
  } else if (name == "cnn") {
    Shape s = add(MakeConv2D(input, 32, 3, kRelu));
    s = add(MakeMaxPool2D(s));
    s = add(MakeConv2D(s, 64, 3, kRelu));
    s = add(MakeMaxPool2D(s));
    s = add(MakeFlatten(s));
    s = add(MakeDense(s, 128, kRelu));
    add(MakeDense(s, classes));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown model '", name, "'; want mlp or cnn"));
  }
  if (max_batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch size ", max_batch, "; want >= 1"));
  return FromLayers(std::move(layers), backend, max_batch, input);
}

std::unique_ptr<Model> Model::FromLayers(std::vector<std::unique_ptr<Layer>> layers, Backend* backend,
                                         int max_batch, Shape input) {
  std::unique_ptr<Model> model(new Model(backend, max_batch, input));
  model->Build(std::move(layers));
  return model;
}

void Model::Build(std::vector<std::unique_ptr<Layer>> layers) {
  layers_ = std::move(layers);
  acts_.push_back(backend_->Alloc(max_batch_ * input_.Size()));
  dacts_.push_back(backend_->Alloc(max_batch_ * input_.Size()));
  if (InputNeedsTranspose()) input_nchw_ = backend_->Alloc(max_batch_ * input_.Size());
  int position = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    layer.Prepare(*backend_, max_batch_);
    tensors_of_layer_.emplace_back();
    for (const ParamSpec& p : layer.Params()) {
      tensors_of_layer_.back().push_back(static_cast<uint32_t>(layout_.tensors.size()));
      layout_.tensors.push_back({absl::StrCat(position, ".", layer.kind(), "/", p.name), p.dims});
      specs_.push_back(p);
      const int64_t n = layout_.tensors.back().NumElements();
      weights_.push_back(backend_->Alloc(n));
      grads_.push_back(backend_->Alloc(n));
    }
    const int64_t out = max_batch_ * layer.output().Size();
    acts_.push_back(backend_->Alloc(out));
    dacts_.push_back(backend_->Alloc(out));
    position += layer.positions();
  }
  labels_ = backend_->AllocInts(max_batch_);
}

Model::~Model() {
  for (float* p : weights_) backend_->Free(p);
  for (float* p : grads_) backend_->Free(p);
  for (float* p : acts_) backend_->Free(p);
  for (float* p : dacts_) backend_->Free(p);
  backend_->Free(labels_);
  backend_->Free(input_nchw_);
}

std::vector<std::vector<float>> Model::InitialWeights(uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < layout_.tensors.size(); ++t) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(specs_[t].fan_in));
    std::uniform_real_distribution<float> u(-bound, bound);
    std::vector<float> values(layout_.tensors[t].NumElements());
    for (float& v : values) v = u(rng);
    out.push_back(std::move(values));
  }
  return out;
}

std::vector<float*> Model::ParamsOf(int l, bool grads) {
  std::vector<float*> out;
  for (uint32_t t : tensors_of_layer_[l]) out.push_back(grads ? grads_[t] : weights_[t]);
  return out;
}

void Model::SetBatch(int batch, const float* images, const int32_t* labels) {
  batch_ = batch;
  if (InputNeedsTranspose()) {
    backend_->CopyIn(input_nchw_, images, batch * input_.Size());
    backend_->TransposeBatched(batch, input_.c, input_.h * input_.w, input_nchw_, acts_[0]);
  } else {
    backend_->CopyIn(acts_[0], images, batch * input_.Size());
  }
  backend_->CopyInInts(labels_, labels, batch);
}

void Model::ForwardLayer(int l) {
  layers_[l]->Forward(*backend_, batch_, acts_[l], acts_[l + 1], ParamsOf(l, false));
}

void Model::ComputeLoss(float* loss, int* correct) {
  const int classes = static_cast<int>(layers_.back()->output().Size());
  backend_->SoftmaxCrossEntropy(batch_, classes, acts_.back(), labels_, dacts_.back(), loss, correct);
}

void Model::BackwardLayer(int l) {
  // The input of the first layer needs no gradient.
  float* dx = l == 0 ? nullptr : dacts_[l];
  layers_[l]->Backward(*backend_, batch_, acts_[l], acts_[l + 1], dacts_[l + 1], dx, ParamsOf(l, false),
                       ParamsOf(l, true));
}

}  // namespace shardps
