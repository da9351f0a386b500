// The CPU backend: cblas_sgemm from OpenBLAS and plain loops the compiler
// vectorises.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "worker/backend.h"

namespace shardps {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    if (threads > 0) openblas_set_num_threads(threads);
  }
  std::string name() const override { return "cpu"; }

  float* Alloc(int64_t n) override { return static_cast<float*>(std::calloc(std::max<int64_t>(n, 1), sizeof(float))); }
  int32_t* AllocInts(int64_t n) override {
    return static_cast<int32_t*>(std::calloc(std::max<int64_t>(n, 1), sizeof(int32_t)));
  }
  void Free(void* p) override { std::free(p); }
  float* AllocHost(int64_t n) override { return Alloc(n); }
  void FreeHost(float* p) override { std::free(p); }
  void CopyIn(float* dst, const float* host, int64_t n) override { std::memcpy(dst, host, n * sizeof(float)); }
  void CopyInInts(int32_t* dst, const int32_t* host, int64_t n) override {
    std::memcpy(dst, host, n * sizeof(int32_t));
  }
  void CopyOut(float* host, const float* src, int64_t n) override { std::memcpy(host, src, n * sizeof(float)); }
  void Fill(float* x, int64_t n, float value) override { std::fill(x, x + n, value); }
  void Copy(float* dst, const float* src, int64_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void Synchronize() override {}

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
            float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                ta ? m : k, b, tb ? k : n, beta, c, n);
  }

  void AddRowBias(int rows, int cols, const float* bias, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
  void RowBiasGrad(int rows, int cols, const float* dy, float* db) override {
    std::fill(db, db + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = dy + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) db[c] += row[c];
    }
  }
  void AddChannelBias(int batch, int channels, int spatial, const float* bias, float* y) override {
    for (int n = 0; n < batch; ++n) {
      for (int c = 0; c < channels; ++c) {
        float* p = y + (static_cast<int64_t>(n) * channels + c) * spatial;
        for (int s = 0; s < spatial; ++s) p[s] += bias[c];
      }
    }
  }
  void ChannelBiasGrad(int batch, int channels, int spatial, const float* dy, float* db) override {
    for (int c = 0; c < channels; ++c) {
      double sum = 0;
      for (int n = 0; n < batch; ++n) {
        const float* p = dy + (static_cast<int64_t>(n) * channels + c) * spatial;
        for (int s = 0; s < spatial; ++s) sum += p[s];
      }
      db[c] = static_cast<float>(sum);
    }
  }

  void Relu(int64_t n, const float* x, float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
  }

  void Im2Col(int batch, int channels, int h, int w, int k, int pad, const float* images, float* col) override {
    const int64_t spatial = static_cast<int64_t>(h) * w, width = batch * spatial;
    for (int c = 0; c < channels; ++c) {
      for (int ky = 0; ky < k; ++ky) {
        for (int kx = 0; kx < k; ++kx) {
          float* row = col + ((static_cast<int64_t>(c) * k + ky) * k + kx) * width;
          for (int n = 0; n < batch; ++n) {
            const float* image = images + (static_cast<int64_t>(n) * channels + c) * spatial;
            float* out = row + n * spatial;
            for (int y = 0; y < h; ++y) {
              const int iy = y + ky - pad;
              for (int x = 0; x < w; ++x) {
                const int ix = x + kx - pad;
                out[y * w + x] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? image[iy * w + ix] : 0.0f;
              }
            }
          }
        }
      }
    }
  }
  void Col2Im(int batch, int channels, int h, int w, int k, int pad, const float* col, float* images) override {
    const int64_t spatial = static_cast<int64_t>(h) * w, width = batch * spatial;
    std::fill(images, images + batch * channels * spatial, 0.0f);
    for (int c = 0; c < channels; ++c) {
      for (int ky = 0; ky < k; ++ky) {
        for (int kx = 0; kx < k; ++kx) {
          const float* row = col + ((static_cast<int64_t>(c) * k + ky) * k + kx) * width;
          for (int n = 0; n < batch; ++n) {
            float* image = images + (static_cast<int64_t>(n) * channels + c) * spatial;
            const float* in = row + n * spatial;
            for (int y = 0; y < h; ++y) {
              const int iy = y + ky - pad;
              if (iy < 0 || iy >= h) continue;
              for (int x = 0; x < w; ++x) {
                const int ix = x + kx - pad;
                if (ix >= 0 && ix < w) image[iy * w + ix] += in[y * w + x];
              }
            }
          }
        }
      }
    }
  }
  void SwapLeadingAxes(int a, int b, int inner, const float* x, float* y) override {
    for (int i = 0; i < a; ++i) {
      for (int j = 0; j < b; ++j) {
        std::memcpy(y + (static_cast<int64_t>(j) * a + i) * inner, x + (static_cast<int64_t>(i) * b + j) * inner,
                    inner * sizeof(float));
      }
    }
  }

  void MaxPool2(int batch, int channels, int h, int w, const float* x, float* y, int32_t* argmax) override {
    const int oh = h / 2, ow = w / 2;
    for (int64_t plane = 0; plane < static_cast<int64_t>(batch) * channels; ++plane) {
      const float* in = x + plane * h * w;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          int best = (2 * oy) * w + 2 * ox;
          for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
              const int i = (2 * oy + dy) * w + 2 * ox + dx;
              if (in[i] > in[best]) best = i;
            }
          }
          const int64_t o = plane * oh * ow + oy * ow + ox;
          y[o] = in[best];
          argmax[o] = best;
        }
      }
    }
  }
  void MaxPool2Grad(int batch, int channels, int h, int w, const float* dy, const int32_t* argmax,
                    float* dx) override {
    const int64_t out_plane = (h / 2) * (w / 2);
    std::fill(dx, dx + static_cast<int64_t>(batch) * channels * h * w, 0.0f);
    for (int64_t plane = 0; plane < static_cast<int64_t>(batch) * channels; ++plane) {
      for (int64_t o = 0; o < out_plane; ++o) {
        dx[plane * h * w + argmax[plane * out_plane + o]] += dy[plane * out_plane + o];
      }
    }
  }

  void SoftmaxCrossEntropy(int rows, int classes, const float* logits, const int32_t* labels, float* dlogits,
                           float* loss, int* correct) override {
    double total = 0;
    int right = 0;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<int64_t>(r) * classes;
      float* d = dlogits + static_cast<int64_t>(r) * classes;
      const int arg = static_cast<int>(std::max_element(z, z + classes) - z);
      const float zmax = z[arg];
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
      const double log_sum = std::log(sum);
      total += log_sum - (z[labels[r]] - zmax);
      for (int c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c] - zmax) - log_sum);
        d[c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
      right += arg == labels[r];
    }
    *loss = static_cast<float>(total / rows);
    *correct = right;
  }
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace shardps
