// The CPU backend (the reference) and the CUDA backend side by side, with
// tensors that hold the same values on both, and a closeness check.
#ifndef SHARDPS_TESTS_GPU_TWIN_BACKENDS_H_
#define SHARDPS_TESTS_GPU_TWIN_BACKENDS_H_

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "worker/backend.h"
#include "worker/cuda_backend.h"

namespace shardps {

struct TwinBackends {
  TwinBackends() : cpu(MakeCpuBackend(1)) {
    auto made = MakeCudaBackend(0, /*tf32=*/false);
    REQUIRE(made.ok());
    gpu = std::move(*made);
  }
  std::unique_ptr<Backend> cpu, gpu;
};

// n floats on both backends, freed with the object.
class Twin {
 public:
  Twin(TwinBackends& be, const std::vector<float>& values) : be_(be), n_(values.size()) {
    cpu_ = be.cpu->Alloc(n_);
    gpu_ = be.gpu->Alloc(n_);
    be.cpu->CopyIn(cpu_, values.data(), n_);
    be.gpu->CopyIn(gpu_, values.data(), n_);
  }
  Twin(TwinBackends& be, int64_t n) : Twin(be, std::vector<float>(n, 0.0f)) {}
  ~Twin() {
    be_.cpu->Free(cpu_);
    be_.gpu->Free(gpu_);
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  float* cpu() const { return cpu_; }
  float* gpu() const { return gpu_; }
  std::vector<float> CpuValues() const {
    std::vector<float> v(n_);
    be_.cpu->CopyOut(v.data(), cpu_, n_);
    return v;
  }
  std::vector<float> GpuValues() const {
    std::vector<float> v(n_);
    be_.gpu->CopyOut(v.data(), gpu_, n_);
    return v;
  }

 private:
  TwinBackends& be_;
  int64_t n_;
  float* cpu_;
  float* gpu_;
};

inline std::vector<float> RandomValues(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Every |got - want| <= atol + rtol * |want|; reports the first miss.
inline void RequireClose(const std::vector<float>& want, const std::vector<float>& got, float atol, float rtol) {
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      INFO("index " << i << " of " << want.size() << ": want " << want[i] << ", got " << got[i]);
      REQUIRE(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
    }
  }
}

// The CPU and CUDA results of a twin after running on both backends.
inline void RequireTwinClose(const Twin& t, float atol = 1e-5f, float rtol = 1e-5f) {
  RequireClose(t.CpuValues(), t.GpuValues(), atol, rtol);
}

}  // namespace shardps

#endif  // SHARDPS_TESTS_GPU_TWIN_BACKENDS_H_
