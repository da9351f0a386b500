// The CPU backend's channels-last operations on inputs small enough to work
// out by hand: it is the reference the CUDA kernels are compared with
// (tests/gpu/kernels_test.cc), so its own results are checked exactly here.
#include <catch2/catch.hpp>

#include <vector>

#include "worker/backend.h"

namespace shardps {
namespace {

TEST_CASE("im2col lays channels-last pixels out as rows of (channel, ky, kx) and col2im adds them back",
          "[backend]") {
  auto be = MakeCpuBackend(1);
  // One 2x2 image with 2 channels, NHWC: pixel (y, x) holds {10(y*2+x)+1, 10(y*2+x)+2}.
  const std::vector<float> image = {1, 2, 11, 12, 21, 22, 31, 32};
  std::vector<float> col(4 * 2 * 9, -1);
  be->Im2Col(1, 2, 2, 2, 3, 1, image.data(), col.data());
  // Row of pixel (0, 0), channel 0: its 3x3 neighbourhood, zero outside.
  CHECK(std::vector<float>(col.begin(), col.begin() + 9) == std::vector<float>{0, 0, 0, 0, 1, 11, 0, 21, 31});
  // Row of pixel (1, 1), channel 1.
  CHECK(std::vector<float>(col.begin() + 3 * 18 + 9, col.begin() + 4 * 18) ==
        std::vector<float>{2, 12, 0, 22, 32, 0, 0, 0, 0});
  std::vector<float> back(8, -1);
  be->Col2Im(1, 2, 2, 2, 3, 1, col.data(), back.data());
  // Every pixel of a 2x2 image is in all four 3x3 windows: four copies.
  CHECK(back == std::vector<float>{4, 8, 44, 48, 84, 88, 124, 128});
}

TEST_CASE("a batched transpose turns NCHW into NHWC and back", "[backend]") {
  auto be = MakeCpuBackend(1);
  const std::vector<float> nchw = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 2 samples x 2 channels x 3 pixels
  std::vector<float> nhwc(12), again(12);
  be->TransposeBatched(2, 2, 3, nchw.data(), nhwc.data());
  CHECK(nhwc == std::vector<float>{1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12});
  be->TransposeBatched(2, 3, 2, nhwc.data(), again.data());
  CHECK(again == nchw);
}

TEST_CASE("channels-last max pooling records the window position and routes the gradient there", "[backend]") {
  auto be = MakeCpuBackend(1);
  // A 2x2 image, 2 channels: channel 0 peaks at (1, 0), channel 1 is all ties.
  const std::vector<float> x = {1, 5, 2, 5, 9, 5, 3, 5};
  std::vector<float> y(2);
  std::vector<int32_t> argmax(2, -1);
  be->MaxPool2(1, 2, 2, 2, x.data(), y.data(), argmax.data());
  CHECK(y == std::vector<float>{9, 5});
  CHECK(argmax == std::vector<int32_t>{2, 0});  // 2 * dy + dx; the first on ties
  const std::vector<float> dy = {0.5f, -1};
  std::vector<float> dx(8, 7);
  be->MaxPool2Grad(1, 2, 2, 2, dy.data(), argmax.data(), dx.data());
  CHECK(dx == std::vector<float>{0, -1, 0, 0, 0.5f, 0, 0, 0});
}

TEST_CASE("bias with a fused ReLU, and ReLU's backward fused with the bias gradient", "[backend]") {
  auto be = MakeCpuBackend(1);
  std::vector<float> y = {-1, 2, 3, -4};  // 2 rows x 2 columns
  const std::vector<float> bias = {0.5f, -2.5f};
  be->AddRowBias(2, 2, bias.data(), /*relu=*/true, y.data());
  CHECK(y == std::vector<float>{0, 0, 3.5f, 0});
  std::vector<float> plain = {-1, 2, 3, -4};
  be->AddRowBias(2, 2, bias.data(), /*relu=*/false, plain.data());
  CHECK(plain == std::vector<float>{-0.5f, -0.5f, 3.5f, -6.5f});
  const std::vector<float> dy = {1, 2, 3, 4};
  std::vector<float> dz(4), db(2, 9);
  be->ReluRowBiasGrad(2, 2, y.data(), dy.data(), dz.data(), db.data());
  CHECK(dz == std::vector<float>{0, 0, 3, 0});
  CHECK(db == std::vector<float>{3, 0});
  be->RowBiasGrad(2, 2, dy.data(), db.data());
  CHECK(db == std::vector<float>{4, 6});
}

}  // namespace
}  // namespace shardps
