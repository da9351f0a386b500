// The CPU backend: cblas_sgemm from OpenBLAS and plain loops the compiler
// vectorises.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

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

  void AddRowBias(int rows, int cols, const float* bias, bool relu, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) row[c] += bias[c];
      if (relu) {
        for (int c = 0; c < cols; ++c) row[c] = row[c] > 0 ? row[c] : 0.0f;
      }
    }
  }
  // Sums in double: a convolution's bias gradient adds batch * h * w values.
  void RowBiasGrad(int rows, int cols, const float* dy, float* db) override {
    std::vector<double> sums(cols, 0.0);
    for (int r = 0; r < rows; ++r) {
      const float* row = dy + static_cast<int64_t>(r) * cols;
      for (int c = 0; c < cols; ++c) sums[c] += row[c];
    }
    for (int c = 0; c < cols; ++c) db[c] = static_cast<float>(sums[c]);
  }
  void ReluRowBiasGrad(int rows, int cols, const float* y, const float* dy, float* dz, float* db) override {
    ReluGrad(static_cast<int64_t>(rows) * cols, y, dy, dz);
    RowBiasGrad(rows, cols, dz, db);
  }

  void Relu(int64_t n, const float* x, float* y) override {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
  }

  void Im2Col(int batch, int h, int w, int channels, int k, int pad, const float* images, float* col) override {
    const int kk = k * k;
    for (int n = 0; n < batch; ++n) {
      const float* image = images + static_cast<int64_t>(n) * h * w * channels;
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          float* row = col + ((static_cast<int64_t>(n) * h + y) * w + x) * channels * kk;
          for (int c = 0; c < channels; ++c) {
            for (int ky = 0; ky < k; ++ky) {
              const int iy = y + ky - pad;
              for (int kx = 0; kx < k; ++kx) {
                const int ix = x + kx - pad;
                row[c * kk + ky * k + kx] =
                    (iy >= 0 && iy < h && ix >= 0 && ix < w) ? image[(iy * w + ix) * channels + c] : 0.0f;
              }
            }
          }
        }
      }
    }
  }
  // A gather in (ky, kx) order, as the CUDA kernel sums.
  void Col2Im(int batch, int h, int w, int channels, int k, int pad, const float* col, float* images) override {
    const int kk = k * k, patch = channels * kk;
    for (int n = 0; n < batch; ++n) {
      for (int iy = 0; iy < h; ++iy) {
        for (int ix = 0; ix < w; ++ix) {
          float* out = images + ((static_cast<int64_t>(n) * h + iy) * w + ix) * channels;
          for (int c = 0; c < channels; ++c) {
            float sum = 0.0f;
            for (int ky = 0; ky < k; ++ky) {
              const int y = iy - ky + pad;
              if (y < 0 || y >= h) continue;
              for (int kx = 0; kx < k; ++kx) {
                const int x = ix - kx + pad;
                if (x < 0 || x >= w) continue;
                sum += col[((static_cast<int64_t>(n) * h + y) * w + x) * patch + c * kk + ky * k + kx];
              }
            }
            out[c] = sum;
          }
        }
      }
    }
  }
  void TransposeBatched(int batch, int rows, int cols, const float* x, float* y) override {
    const int64_t plane = static_cast<int64_t>(rows) * cols;
    for (int n = 0; n < batch; ++n) {
      for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < cols; ++j) {
          y[n * plane + static_cast<int64_t>(j) * rows + i] = x[n * plane + static_cast<int64_t>(i) * cols + j];
        }
      }
    }
  }

  void MaxPool2(int batch, int h, int w, int channels, const float* x, float* y, int32_t* argmax) override {
    const int oh = h / 2, ow = w / 2;
    const int64_t down = static_cast<int64_t>(w) * channels;
    for (int n = 0; n < batch; ++n) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const float* window = x + ((static_cast<int64_t>(n) * h + 2 * oy) * w + 2 * ox) * channels;
          const int64_t o = ((static_cast<int64_t>(n) * oh + oy) * ow + ox) * channels;
          for (int c = 0; c < channels; ++c) {
            const float v[4] = {window[c], window[channels + c], window[down + c], window[down + channels + c]};
            int best = 0;
            for (int i = 1; i < 4; ++i) {
              if (v[i] > v[best]) best = i;
            }
            y[o + c] = v[best];
            argmax[o + c] = best;
          }
        }
      }
    }
  }
  void MaxPool2Grad(int batch, int h, int w, int channels, const float* dy, const int32_t* argmax,
                    float* dx) override {
    const int oh = h / 2, ow = w / 2;
    for (int n = 0; n < batch; ++n) {
      for (int iy = 0; iy < h; ++iy) {
        for (int ix = 0; ix < w; ++ix) {
          float* out = dx + ((static_cast<int64_t>(n) * h + iy) * w + ix) * channels;
          const int64_t o = ((static_cast<int64_t>(n) * oh + iy / 2) * ow + ix / 2) * channels;
          const int position = 2 * (iy % 2) + ix % 2;
          for (int c = 0; c < channels; ++c) out[c] = argmax[o + c] == position ? dy[o + c] : 0.0f;
        }
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
