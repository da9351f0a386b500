// main() of the GPU tests: runs the Catch2 session where a CUDA device is
// present; elsewhere prints why the tests were skipped (tools/test counts
// these lines) and exits 0, so builds without a GPU still pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "kernels/cuda_context.h"

int main(int argc, char** argv) {
  absl::StatusOr<int> gpus = shardps::CudaDeviceCount();
  if (!gpus.ok()) {
    const std::string self = argv[0];
    const std::string why(gpus.status().message());
    std::printf("SKIPPED (no GPU): %s: %s\n", self.substr(self.find_last_of('/') + 1).c_str(), why.c_str());
    return 0;
  }
  std::printf("running on %d CUDA device(s)\n", *gpus);
  return Catch::Session().run(argc, argv);
}
