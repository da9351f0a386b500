// Finite-difference gradient checks of every layer and of both named models
// on the CPU backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "worker/model.h"

namespace shardps {
namespace {

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Batch RandomBatch(int batch, Shape input, int classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Batch b;
  b.images.resize(batch * input.Size());
  for (float& x : b.images) x = u(rng);
  for (int i = 0; i < batch; ++i) b.labels.push_back(static_cast<int32_t>(rng() % classes));
  return b;
}

float Loss(Model& m, int batch, const Batch& b) {
  m.SetBatch(batch, b.images.data(), b.labels.data());
  for (int l = 0; l < m.num_layers(); ++l) m.ForwardLayer(l);
  float loss;
  int correct;
  m.ComputeLoss(&loss, &correct);
  return loss;
}

// Compares backward's gradients with central differences on up to `samples`
// entries of every tensor. An entry whose one-sided differences disagree sits
// on a ReLU or max-pool kink, where no finite difference is the gradient: it
// is skipped and counted, and few may be.
void CheckGradients(Model& m, int batch, const Batch& b, int samples) {
  Backend& be = m.backend();
  const auto init = m.InitialWeights(11);
  for (uint32_t t = 0; t < init.size(); ++t) be.CopyIn(m.weights(t), init[t].data(), init[t].size());
  const double base = Loss(m, batch, b);
  for (int l = m.num_layers() - 1; l >= 0; --l) m.BackwardLayer(l);
  std::mt19937 rng(5);
  int checked = 0, kinks = 0;
  for (uint32_t t = 0; t < init.size(); ++t) {
    std::vector<float> grad(init[t].size());
    be.CopyOut(grad.data(), m.grads(t), grad.size());
    std::vector<float> w = init[t];
    for (int s = 0; s < std::min<int>(samples, static_cast<int>(w.size())); ++s) {
      const size_t i = samples >= static_cast<int>(w.size()) ? s : rng() % w.size();
      const float eps = 1e-3f;
      const float saved = w[i];
      w[i] = saved + eps;
      be.CopyIn(m.weights(t), w.data(), w.size());
      const double plus = Loss(m, batch, b);
      w[i] = saved - eps;
      be.CopyIn(m.weights(t), w.data(), w.size());
      const double minus = Loss(m, batch, b);
      w[i] = saved;
      be.CopyIn(m.weights(t), w.data(), w.size());
      const double numeric = (plus - minus) / (2 * eps);
      if (std::abs((plus - base) - (base - minus)) / eps > 2e-3 + 0.1 * std::abs(numeric)) {
        ++kinks;
        continue;
      }
      INFO("tensor " << m.layout().tensors[t].name << " index " << i << " analytic " << grad[i] << " numeric "
                     << numeric);
      REQUIRE(std::abs(numeric - grad[i]) <= 2e-3 + 5e-2 * std::abs(numeric));
      ++checked;
    }
  }
  INFO(kinks << " entries on kinks, " << checked << " checked");
  REQUIRE(checked > 0);
  REQUIRE(kinks <= checked / 10 + 1);
}

TEST_CASE("dense, relu and flatten gradients match finite differences", "[gradient]") {
  auto be = MakeCpuBackend(1);
  const Shape in{1, 3, 3};
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(MakeFlatten(in));
  layers.push_back(MakeDense({9, 1, 1}, 5));
  layers.push_back(MakeRelu({5, 1, 1}));
  layers.push_back(MakeDense({5, 1, 1}, 4));
  auto m = Model::FromLayers(std::move(layers), be.get(), 3, in);
  REQUIRE(m->layout().tensors.size() == 4);
  CheckGradients(*m, 3, RandomBatch(3, in, 4, 1), 1000);
}

TEST_CASE("conv2d and maxpool gradients match finite differences", "[gradient]") {
  auto be = MakeCpuBackend(1);
  const Shape in{2, 6, 6};
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(MakeConv2D(in, 3, 3));
  layers.push_back(MakeRelu({3, 6, 6}));
  layers.push_back(MakeConv2D({3, 6, 6}, 2, 3));
  layers.push_back(MakeMaxPool2D({2, 6, 6}));
  layers.push_back(MakeFlatten({2, 3, 3}));
  layers.push_back(MakeDense({18, 1, 1}, 4));
  auto m = Model::FromLayers(std::move(layers), be.get(), 2, in);
  CheckGradients(*m, 2, RandomBatch(2, in, 4, 2), 1000);
}

TEST_CASE("mlp and cnn gradients match finite differences", "[gradient]") {
  auto be = MakeCpuBackend(1);
  for (const char* name : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(name) {
      auto m = Model::Create(name, be.get(), 2);
      REQUIRE(m.ok());
      CheckGradients(**m, 2, RandomBatch(2, {1, 28, 28}, 10, 3), 12);
    }
  }
}

TEST_CASE("named models have the documented layouts", "[gradient]") {
  auto be = MakeCpuBackend(1);
  auto mlp = Model::Create("mlp", be.get(), 1);
  REQUIRE(mlp.ok());
  REQUIRE(LayoutDebugString((*mlp)->layout()) ==
          "1.dense/w[784,256] 1.dense/b[256] 3.dense/w[256,128] 3.dense/b[128] 5.dense/w[128,10] 5.dense/b[10]");
  auto cnn = Model::Create("cnn", be.get(), 1);
  REQUIRE(cnn.ok());
  REQUIRE(LayoutDebugString((*cnn)->layout()) ==
          "0.conv/w[32,1,3,3] 0.conv/b[32] 3.conv/w[64,32,3,3] 3.conv/b[64] 7.dense/w[3136,128] 7.dense/b[128] "
          "9.dense/w[128,10] 9.dense/b[10]");
  REQUIRE(Model::Create("resnet", be.get(), 1).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
