#include "worker/layers.h"

namespace shardps {
namespace {

// Frees backend memory on destruction.
class Scratch {
 public:
  ~Scratch() {
    if (be_ != nullptr) be_->Free(p_);
  }
  void Reset(Backend& be, void* p) {
    if (be_ != nullptr) be_->Free(p_);
    be_ = &be;
    p_ = p;
  }
  float* floats() const { return static_cast<float*>(p_); }
  int32_t* ints() const { return static_cast<int32_t*>(p_); }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
};

class Dense final : public Layer {
 public:
  Dense(Shape in, int out) : in_(static_cast<int>(in.Size())), out_(out) {}
  std::string kind() const override { return "dense"; }
  Shape output() const override { return {out_, 1, 1}; }
  std::vector<ParamSpec> Params() const override {
    return {{"w", {in_, out_}, in_}, {"b", {out_}, in_}};
  }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& p) override {
    be.Gemm(false, false, batch, out_, in_, 1.0f, x, p[0], 0.0f, y);  // y = x W
    be.AddRowBias(batch, out_, p[1], y);
  }
  void Backward(Backend& be, int batch, const float* x, const float*, const float* dy, float* dx,
                const std::vector<float*>& p, const std::vector<float*>& g) override {
    be.Gemm(true, false, in_, out_, batch, 1.0f, x, dy, 0.0f, g[0]);  // dW = x^T dy
    be.RowBiasGrad(batch, out_, dy, g[1]);
    if (dx != nullptr) be.Gemm(false, true, batch, in_, out_, 1.0f, dy, p[0], 0.0f, dx);  // dx = dy W^T
  }

 private:
  const int in_, out_;
};

class Relu final : public Layer {
 public:
  explicit Relu(Shape in) : shape_(in) {}
  std::string kind() const override { return "relu"; }
  Shape output() const override { return shape_; }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>&) override {
    be.Relu(batch * shape_.Size(), x, y);
  }
  void Backward(Backend& be, int batch, const float*, const float* y, const float* dy, float* dx,
                const std::vector<float*>&, const std::vector<float*>&) override {
    if (dx != nullptr) be.ReluGrad(batch * shape_.Size(), y, dy, dx);
  }

 private:
  const Shape shape_;
};

// Same-padding k x k convolution, stride 1, through im2col and GEMM per sample.
class Conv2D final : public Layer {
 public:
  Conv2D(Shape in, int out, int k) : in_(in), out_(out), k_(k) {}
  std::string kind() const override { return "conv"; }
  Shape output() const override { return {out_, in_.h, in_.w}; }
  std::vector<ParamSpec> Params() const override {
    const int64_t fan_in = static_cast<int64_t>(in_.c) * k_ * k_;
    return {{"w", {out_, in_.c, k_, k_}, fan_in}, {"b", {out_}, fan_in}};
  }
  void Prepare(Backend& be, int) override { col_.Reset(be, be.Alloc(ColSize())); }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& p) override {
    const int spatial = in_.h * in_.w, patch = in_.c * k_ * k_;
    for (int n = 0; n < batch; ++n) {
      be.Im2Col(in_.c, in_.h, in_.w, k_, k_ / 2, x + n * in_.Size(), col_.floats());
      be.Gemm(false, false, out_, spatial, patch, 1.0f, p[0], col_.floats(), 0.0f,
              y + static_cast<int64_t>(n) * out_ * spatial);
    }
    be.AddChannelBias(batch, out_, spatial, p[1], y);
  }
  void Backward(Backend& be, int batch, const float* x, const float*, const float* dy, float* dx,
                const std::vector<float*>& p, const std::vector<float*>& g) override {
    const int spatial = in_.h * in_.w, patch = in_.c * k_ * k_;
    if (dx != nullptr) be.Fill(dx, batch * in_.Size(), 0.0f);
    for (int n = 0; n < batch; ++n) {
      const float* dyn = dy + static_cast<int64_t>(n) * out_ * spatial;
      be.Im2Col(in_.c, in_.h, in_.w, k_, k_ / 2, x + n * in_.Size(), col_.floats());
      // dW (+)= dy_n col^T
      be.Gemm(false, true, out_, patch, spatial, 1.0f, dyn, col_.floats(), n == 0 ? 0.0f : 1.0f, g[0]);
      if (dx != nullptr) {
        be.Gemm(true, false, patch, spatial, out_, 1.0f, p[0], dyn, 0.0f, col_.floats());  // dcol = W^T dy_n
        be.Col2Im(in_.c, in_.h, in_.w, k_, k_ / 2, col_.floats(), dx + n * in_.Size());
      }
    }
    be.ChannelBiasGrad(batch, out_, spatial, dy, g[1]);
  }

 private:
  int64_t ColSize() const { return static_cast<int64_t>(in_.c) * k_ * k_ * in_.h * in_.w; }
  const Shape in_;
  const int out_, k_;
  Scratch col_;
};

class MaxPool2D final : public Layer {
 public:
  explicit MaxPool2D(Shape in) : in_(in) {}
  std::string kind() const override { return "maxpool"; }
  Shape output() const override { return {in_.c, in_.h / 2, in_.w / 2}; }
  void Prepare(Backend& be, int max_batch) override {
    argmax_.Reset(be, be.AllocInts(max_batch * output().Size()));
  }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>&) override {
    be.MaxPool2(batch, in_.c, in_.h, in_.w, x, y, argmax_.ints());
  }
  void Backward(Backend& be, int batch, const float*, const float*, const float* dy, float* dx,
                const std::vector<float*>&, const std::vector<float*>&) override {
    if (dx != nullptr) be.MaxPool2Grad(batch, in_.c, in_.h, in_.w, dy, argmax_.ints(), dx);
  }

 private:
  const Shape in_;
  Scratch argmax_;
};

// NCHW is already contiguous per sample: flattening only copies values.
class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : in_(in) {}
  std::string kind() const override { return "flatten"; }
  Shape output() const override { return {static_cast<int>(in_.Size()), 1, 1}; }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>&) override {
    be.Copy(y, x, batch * in_.Size());
  }
  void Backward(Backend& be, int batch, const float*, const float*, const float* dy, float* dx,
                const std::vector<float*>&, const std::vector<float*>&) override {
    if (dx != nullptr) be.Copy(dx, dy, batch * in_.Size());
  }

 private:
  const Shape in_;
};

}  // namespace

std::unique_ptr<Layer> MakeDense(Shape in, int out) { return std::make_unique<Dense>(in, out); }
std::unique_ptr<Layer> MakeRelu(Shape in) { return std::make_unique<Relu>(in); }
std::unique_ptr<Layer> MakeConv2D(Shape in, int out, int k) { return std::make_unique<Conv2D>(in, out, k); }
std::unique_ptr<Layer> MakeMaxPool2D(Shape in) { return std::make_unique<MaxPool2D>(in); }
std::unique_ptr<Layer> MakeFlatten(Shape in) { return std::make_unique<Flatten>(in); }

}  // namespace shardps
