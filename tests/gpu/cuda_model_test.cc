// Whole-model forward and backward, CUDA against the CPU backend: the same
// weights and batch give the same loss, correct count and gradients of every
// tensor, for both named models. Runs on a GPU only.
#include <catch2/catch.hpp>

#include "tests/gpu/twin_backends.h"
#include "worker/model.h"

namespace shardps {
namespace {

struct Result {
  float loss = 0;
  int correct = 0;
  std::vector<std::vector<float>> grads;
};

Result ForwardBackward(Model& m, const std::vector<std::vector<float>>& weights, int batch,
                       const std::vector<float>& images, const std::vector<int32_t>& labels) {
  Backend& be = m.backend();
  for (uint32_t t = 0; t < weights.size(); ++t) be.CopyIn(m.weights(t), weights[t].data(), weights[t].size());
  m.SetBatch(batch, images.data(), labels.data());
  for (int l = 0; l < m.num_layers(); ++l) m.ForwardLayer(l);
  Result r;
  m.ComputeLoss(&r.loss, &r.correct);
  for (int l = m.num_layers() - 1; l >= 0; --l) m.BackwardLayer(l);
  for (uint32_t t = 0; t < weights.size(); ++t) {
    r.grads.emplace_back(weights[t].size());
    be.CopyOut(r.grads.back().data(), m.grads(t), weights[t].size());
  }
  REQUIRE(be.status().ok());
  return r;
}

TEST_CASE("mlp and cnn gradients on CUDA match the CPU backend", "[gpu]") {
  TwinBackends be;
  for (const char* name : {"mlp", "cnn"}) {
    for (int batch : {1, 64, 512}) {
      INFO(name << " batch " << batch);
      auto cpu_model = Model::Create(name, be.cpu.get(), batch);
      auto gpu_model = Model::Create(name, be.gpu.get(), batch);
      REQUIRE(cpu_model.ok());
      REQUIRE(gpu_model.ok());
      const auto weights = (*cpu_model)->InitialWeights(3);
      const std::vector<float> images = RandomValues(int64_t{batch} * 28 * 28, 21, 0, 1);
      std::vector<int32_t> labels(batch);
      for (int i = 0; i < batch; ++i) labels[i] = (i * 3) % 10;
      const Result want = ForwardBackward(**cpu_model, weights, batch, images, labels);
      const Result got = ForwardBackward(**gpu_model, weights, batch, images, labels);
      CHECK(got.loss == Approx(want.loss).epsilon(1e-4));
      CHECK(got.correct == want.correct);
      for (size_t t = 0; t < want.grads.size(); ++t) {
        INFO("tensor " << (*cpu_model)->layout().tensors[t].name);
        RequireClose(want.grads[t], got.grads[t], 1e-5f, 1e-3f);
      }
    }
  }
}

TEST_CASE("with TF32 on, cnn gradients stay within TF32's precision of the CPU", "[gpu]") {
  auto cpu = MakeCpuBackend(1);
  auto gpu = MakeCudaBackend(0, /*tf32=*/true);
  REQUIRE(gpu.ok());
  const int batch = 64;
  auto cpu_model = Model::Create("cnn", cpu.get(), batch);
  auto gpu_model = Model::Create("cnn", gpu->get(), batch);
  REQUIRE(cpu_model.ok());
  REQUIRE(gpu_model.ok());
  const auto weights = (*cpu_model)->InitialWeights(3);
  const std::vector<float> images = RandomValues(int64_t{batch} * 28 * 28, 22, 0, 1);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  const Result want = ForwardBackward(**cpu_model, weights, batch, images, labels);
  const Result got = ForwardBackward(**gpu_model, weights, batch, images, labels);
  CHECK(got.loss == Approx(want.loss).epsilon(1e-2));
  for (size_t t = 0; t < want.grads.size(); ++t) {
    INFO("tensor " << (*cpu_model)->layout().tensors[t].name);
    RequireClose(want.grads[t], got.grads[t], 1e-3f, 5e-2f);
  }
}

}  // namespace
}  // namespace shardps
