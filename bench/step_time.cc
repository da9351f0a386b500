// step_time: per-step time of a model's forward + loss + backward on one
// backend, no network: the compute part of a worker's step. The batch is
// copied in from host memory every step, as the trainer does; the optimizer
// runs on the servers, so it is not part of a step.
//
//   step_time --device=cuda --models=mlp,cnn --batches=64,512
// prints one line per (model, batch):
//   step_time device=<name> model=mlp batch=64 ms_per_step=0.412 samples_per_s=155339
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "kernels/cuda_context.h"
#include "worker/backend.h"
#include "worker/cuda_backend.h"
#include "worker/model.h"

ABSL_FLAG(std::string, device, "cuda", "cpu or cuda.");
ABSL_FLAG(std::string, models, "mlp,cnn", "Comma-separated model names.");
ABSL_FLAG(std::string, batches, "64,512", "Comma-separated batch sizes.");
ABSL_FLAG(int, steps, 50, "Timed steps per (model, batch); the median of 5 rounds of steps/5 is reported.");
ABSL_FLAG(int, warmup, 5, "Untimed steps first.");
ABSL_FLAG(bool, tf32, false, "cuBLAS TF32 tensor cores (cuda).");
ABSL_FLAG(int, blas_threads, 0, "OpenBLAS threads (cpu; 0: OpenBLAS's choice).");

namespace shardps {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend() {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cpu") return MakeCpuBackend(absl::GetFlag(FLAGS_blas_threads));
  if (device == "cuda") return MakeCudaBackend(0, absl::GetFlag(FLAGS_tf32));
  return absl::InvalidArgumentError("--device must be cpu or cuda");
}

// Milliseconds per step: the median over 5 rounds.
absl::StatusOr<double> TimeModel(Backend& be, const std::string& name, int batch) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(name, &be, batch);
  if (!model.ok()) return model.status();
  Model& m = **model;
  const auto weights = m.InitialWeights(1);
  for (uint32_t t = 0; t < weights.size(); ++t) be.CopyIn(m.weights(t), weights[t].data(), weights[t].size());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> images(static_cast<size_t>(batch) * 28 * 28);
  for (float& x : images) x = u(rng);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  auto step = [&] {
    m.SetBatch(batch, images.data(), labels.data());
    for (int l = 0; l < m.num_layers(); ++l) m.ForwardLayer(l);
    float loss;
    int correct;
    m.ComputeLoss(&loss, &correct);
    for (int l = m.num_layers() - 1; l >= 0; --l) m.BackwardLayer(l);
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) step();
  be.Synchronize();
  const int per_round = std::max(1, absl::GetFlag(FLAGS_steps) / 5);
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    const absl::Time start = absl::Now();
    for (int i = 0; i < per_round; ++i) step();
    be.Synchronize();
    rounds.push_back(absl::ToDoubleMilliseconds(absl::Now() - start) / per_round);
  }
  if (!be.status().ok()) return be.status();
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

int Run() {
  absl::StatusOr<std::unique_ptr<Backend>> be = MakeBackend();
  if (!be.ok()) {
    fprintf(stderr, "step_time: %s\n", std::string(be.status().message()).c_str());
    return 1;
  }
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
    for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',', absl::SkipEmpty())) {
      int batch = 0;
      if (!absl::SimpleAtoi(b, &batch) || batch <= 0) {
        fprintf(stderr, "step_time: bad batch size '%s'\n", std::string(b).c_str());
        return 1;
      }
      absl::StatusOr<double> ms = TimeModel(**be, std::string(name), batch);
      if (!ms.ok()) {
        fprintf(stderr, "step_time: %s\n", std::string(ms.status().message()).c_str());
        return 1;
      }
      printf("step_time device=%s model=%s batch=%d ms_per_step=%.4f samples_per_s=%.0f\n", (*be)->name().c_str(),
             std::string(name).c_str(), batch, *ms, batch * 1000.0 / *ms);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("step_time: forward + backward time per step of the named models on one backend.");
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
