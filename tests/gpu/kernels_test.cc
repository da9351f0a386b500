// Every CUDA kernel and the cuBLAS GEMM against the CPU backend (the
// reference), over odd sizes, sizes that are not multiples of the block and
// large sizes, with an absolute plus relative tolerance. Runs on a GPU only.
#include <catch2/catch.hpp>

#include <tuple>

#include "kernels/cuda_context.h"
#include "tests/gpu/twin_backends.h"

namespace shardps {
namespace {

TEST_CASE("fill and batched transposes match the CPU", "[gpu]") {
  TwinBackends be;
  for (int64_t n : {1, 255, 257, (1 << 20) + 3}) {
    Twin x(be, n);
    be.cpu->Fill(x.cpu(), n, 2.5f);
    be.gpu->Fill(x.gpu(), n, 2.5f);
    RequireTwinClose(x, 0, 0);
  }
  for (auto [batch, rows, cols] : {std::tuple{1, 1, 1}, {3, 5, 7}, {2, 33, 65}, {512, 49, 64}, {70000, 2, 3}}) {
    INFO("batch " << batch << " rows " << rows << " cols " << cols);
    Twin x(be, RandomValues(int64_t{batch} * rows * cols, 1)), y(be, int64_t{batch} * rows * cols);
    be.cpu->TransposeBatched(batch, rows, cols, x.cpu(), y.cpu());
    be.gpu->TransposeBatched(batch, rows, cols, x.gpu(), y.gpu());
    RequireTwinClose(y, 0, 0);
  }
}

TEST_CASE("cuBLAS GEMM matches OpenBLAS in every transpose case", "[gpu]") {
  TwinBackends be;
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {7, 13, 5}, {129, 65, 257}, {512, 256, 784}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        INFO("m " << m << " n " << n << " k " << k << " trans_a " << ta << " trans_b " << tb);
        Twin a(be, RandomValues(int64_t{m} * k, 2)), b(be, RandomValues(int64_t{k} * n, 3));
        Twin c(be, RandomValues(int64_t{m} * n, 4));
        be.cpu->Gemm(ta, tb, m, n, k, 0.5f, a.cpu(), b.cpu(), 0.25f, c.cpu());
        be.gpu->Gemm(ta, tb, m, n, k, 0.5f, a.gpu(), b.gpu(), 0.25f, c.gpu());
        RequireTwinClose(c, 1e-4f, 1e-4f);
      }
    }
  }
}

TEST_CASE("row bias (with and without ReLU) and the bias gradients match the CPU", "[gpu]") {
  TwinBackends be;
  // Dense shapes, and convolution outputs seen as (batch * h * w) x channels.
  for (auto [rows, cols] : {std::pair{1, 1}, {3, 10}, {513, 257}, {4096, 33}, {512 * 784, 32}, {512 * 196, 64}}) {
    for (bool relu : {false, true}) {
      INFO("rows " << rows << " cols " << cols << " relu " << relu);
      const int64_t n = int64_t{rows} * cols;
      Twin y(be, RandomValues(n, 5)), bias(be, RandomValues(cols, 6)), db(be, RandomValues(cols, 7));
      be.cpu->AddRowBias(rows, cols, bias.cpu(), relu, y.cpu());
      be.gpu->AddRowBias(rows, cols, bias.gpu(), relu, y.gpu());
      RequireTwinClose(y, 0, 0);
      Twin dy(be, RandomValues(n, 8)), dz(be, RandomValues(n, 9));
      if (relu) {
        be.cpu->ReluRowBiasGrad(rows, cols, y.cpu(), dy.cpu(), dz.cpu(), db.cpu());
        be.gpu->ReluRowBiasGrad(rows, cols, y.gpu(), dy.gpu(), dz.gpu(), db.gpu());
        RequireTwinClose(dz, 0, 0);
      } else {
        be.cpu->RowBiasGrad(rows, cols, dy.cpu(), db.cpu());
        be.gpu->RowBiasGrad(rows, cols, dy.gpu(), db.gpu());
      }
      // Sums of up to 400k values in [-1, 1]: float rounding differs by order.
      RequireTwinClose(db, 1e-2f, 1e-4f);
    }
  }
}

TEST_CASE("the bias gradient is deterministic and its fused ReLU may work in place", "[gpu]") {
  TwinBackends be;
  const int rows = 512 * 196, cols = 64;
  Twin y(be, RandomValues(int64_t{rows} * cols, 10)), dy(be, RandomValues(int64_t{rows} * cols, 11));
  Twin db1(be, cols), db2(be, cols), dz(be, int64_t{rows} * cols);
  be.gpu->ReluRowBiasGrad(rows, cols, y.gpu(), dy.gpu(), dz.gpu(), db1.gpu());
  be.gpu->ReluRowBiasGrad(rows, cols, y.gpu(), dy.gpu(), dy.gpu(), db2.gpu());  // dz = dy, in place
  REQUIRE(db1.GpuValues() == db2.GpuValues());
  REQUIRE(dz.GpuValues() == dy.GpuValues());
}

TEST_CASE("ReLU and its gradient match the CPU exactly", "[gpu]") {
  TwinBackends be;
  for (int64_t n : {1, 255, 257, (1 << 22) + 1}) {
    INFO("n " << n);
    Twin x(be, RandomValues(n, 9)), y(be, n), dy(be, RandomValues(n, 10)), dx(be, n);
    be.cpu->Relu(n, x.cpu(), y.cpu());
    be.gpu->Relu(n, x.gpu(), y.gpu());
    RequireTwinClose(y, 0, 0);
    be.cpu->ReluGrad(n, y.cpu(), dy.cpu(), dx.cpu());
    be.gpu->ReluGrad(n, y.gpu(), dy.gpu(), dx.gpu());
    RequireTwinClose(dx, 0, 0);
  }
}

TEST_CASE("channels-last im2col and col2im match the CPU", "[gpu]") {
  struct Case {
    int batch, h, w, channels, k, pad;
  };
  TwinBackends be;
  for (Case c : {Case{1, 1, 1, 1, 1, 0}, {2, 5, 7, 3, 3, 1}, {64, 14, 14, 32, 3, 1}, {3, 28, 28, 1, 5, 2},
                 {512, 28, 28, 1, 3, 1}, {512, 14, 14, 32, 3, 1}}) {
    INFO("batch " << c.batch << " " << c.h << "x" << c.w << "x" << c.channels << " k " << c.k);
    const int64_t image = int64_t{c.batch} * c.channels * c.h * c.w;
    const int64_t cols = image * c.k * c.k;
    Twin x(be, RandomValues(image, 11)), col(be, cols), back(be, RandomValues(image, 12));
    be.cpu->Im2Col(c.batch, c.h, c.w, c.channels, c.k, c.pad, x.cpu(), col.cpu());
    be.gpu->Im2Col(c.batch, c.h, c.w, c.channels, c.k, c.pad, x.gpu(), col.gpu());
    RequireTwinClose(col, 0, 0);
    be.cpu->Col2Im(c.batch, c.h, c.w, c.channels, c.k, c.pad, col.cpu(), back.cpu());
    be.gpu->Col2Im(c.batch, c.h, c.w, c.channels, c.k, c.pad, col.gpu(), back.gpu());
    RequireTwinClose(back, 0, 0);  // the same sums in the same order
  }
}

TEST_CASE("channels-last 2x2 max pooling and its gradient match the CPU, first maximum on ties", "[gpu]") {
  TwinBackends be;
  for (auto [batch, h, w, channels] : {std::tuple{1, 2, 2, 1}, {3, 6, 10, 5}, {64, 28, 28, 32}, {512, 14, 14, 64}}) {
    INFO("batch " << batch << " " << h << "x" << w << "x" << channels);
    const int64_t in = int64_t{batch} * channels * h * w, out = in / 4;
    for (bool ties : {false, true}) {
      Twin x(be, ties ? std::vector<float>(in, 1.0f) : RandomValues(in, 12)), y(be, out);
      Twin dy(be, RandomValues(out, 13)), dx(be, RandomValues(in, 14));  // dx starts dirty: overwritten
      int32_t* cpu_arg = be.cpu->AllocInts(out);
      int32_t* gpu_arg = be.gpu->AllocInts(out);
      be.cpu->MaxPool2(batch, h, w, channels, x.cpu(), y.cpu(), cpu_arg);
      be.gpu->MaxPool2(batch, h, w, channels, x.gpu(), y.gpu(), gpu_arg);
      RequireTwinClose(y, 0, 0);
      be.cpu->MaxPool2Grad(batch, h, w, channels, dy.cpu(), cpu_arg, dx.cpu());
      be.gpu->MaxPool2Grad(batch, h, w, channels, dy.gpu(), gpu_arg, dx.gpu());
      RequireTwinClose(dx, 0, 0);
      be.cpu->Free(cpu_arg);
      be.gpu->Free(gpu_arg);
    }
  }
}

TEST_CASE("softmax cross-entropy, its gradient and the correct count match the CPU", "[gpu]") {
  TwinBackends be;
  for (auto [rows, classes] : {std::pair{1, 1}, {3, 10}, {512, 10}, {37, 1000}, {4099, 33}}) {
    INFO("rows " << rows << " classes " << classes);
    Twin logits(be, RandomValues(int64_t{rows} * classes, 15, -4, 4)), dlogits(be, int64_t{rows} * classes);
    std::vector<int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % classes;
    int32_t* cpu_labels = be.cpu->AllocInts(rows);
    int32_t* gpu_labels = be.gpu->AllocInts(rows);
    be.cpu->CopyInInts(cpu_labels, labels.data(), rows);
    be.gpu->CopyInInts(gpu_labels, labels.data(), rows);
    float cpu_loss, gpu_loss;
    int cpu_right, gpu_right;
    be.cpu->SoftmaxCrossEntropy(rows, classes, logits.cpu(), cpu_labels, dlogits.cpu(), &cpu_loss, &cpu_right);
    be.gpu->SoftmaxCrossEntropy(rows, classes, logits.gpu(), gpu_labels, dlogits.gpu(), &gpu_loss, &gpu_right);
    REQUIRE(be.gpu->status().ok());
    CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-5).margin(1e-6));
    CHECK(gpu_right == cpu_right);
    RequireTwinClose(dlogits, 1e-6f, 1e-4f);
    be.cpu->Free(cpu_labels);
    be.gpu->Free(gpu_labels);
  }
}

TEST_CASE("a CUDA error is reported in status() and later calls are skipped, not fatal", "[gpu]") {
  TwinBackends be;
  Twin c(be, 4);
  be.gpu->Gemm(false, false, -1, 2, 2, 1.0f, c.gpu(), c.gpu(), 0.0f, c.gpu());  // cuBLAS refuses m < 0
  const absl::Status s = be.gpu->status();
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("cublasSgemm"));
  float loss = 1;
  int right = 1;
  be.gpu->SoftmaxCrossEntropy(2, 2, c.gpu(), nullptr, c.gpu(), &loss, &right);  // skipped: no launch
  CHECK(loss == 0);
  CHECK(right == 0);
  CHECK(be.gpu->status() == s);  // the first error is kept

  auto missing = MakeCudaBackend(1 << 20, false);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("does not exist"));
}

}  // namespace
}  // namespace shardps
