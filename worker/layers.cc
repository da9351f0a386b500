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

// The bias of a Dense or Conv2D output (rows x cols) and its fused
// activation.
class BiasAndActivation {
 public:
  explicit BiasAndActivation(Activation act) : relu_(act == Activation::kRelu) {}
  int positions() const { return relu_ ? 2 : 1; }
  void Prepare(Backend& be, int64_t max_values) {
    if (relu_) dz_.Reset(be, be.Alloc(max_values));
  }
  void Forward(Backend& be, int rows, int cols, const float* bias, float* y) {
    be.AddRowBias(rows, cols, bias, relu_, y);
  }
  // Sets db; returns the gradient before the activation (dy itself without one).
  const float* Backward(Backend& be, int rows, int cols, const float* y, const float* dy, float* db) {
    if (!relu_) {
      be.RowBiasGrad(rows, cols, dy, db);
      return dy;
    }
    be.ReluRowBiasGrad(rows, cols, y, dy, dz_.floats(), db);
    return dz_.floats();
  }

 private:
  const bool relu_;
  Scratch dz_;
};

class Dense final : public Layer {
 public:
  Dense(Shape in, int out, Activation act) : in_(static_cast<int>(in.Size())), out_(out), bias_(act) {}
  std::string kind() const override { return "dense"; }
  Shape output() const override { return {out_, 1, 1}; }
  int positions() const override { return bias_.positions(); }
  std::vector<ParamSpec> Params() const override {
    return {{"w", {in_, out_}, in_}, {"b", {out_}, in_}};
  }
  void Prepare(Backend& be, int max_batch) override { bias_.Prepare(be, static_cast<int64_t>(max_batch) * out_); }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& p) override {
    be.Gemm(false, false, batch, out_, in_, 1.0f, x, p[0], 0.0f, y);  // y = x W
    bias_.Forward(be, batch, out_, p[1], y);
  }
  void Backward(Backend& be, int batch, const float* x, const float* y, const float* dy, float* dx,
                const std::vector<float*>& p, const std::vector<float*>& g) override {
    const float* dz = bias_.Backward(be, batch, out_, y, dy, g[1]);
    be.Gemm(true, false, in_, out_, batch, 1.0f, x, dz, 0.0f, g[0]);  // dW = x^T dz
    if (dx != nullptr) be.Gemm(false, true, batch, in_, out_, 1.0f, dz, p[0], 0.0f, dx);  // dx = dz W^T
  }

 private:
  const int in_, out_;
  BiasAndActivation bias_;
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

// Same-padding k x k convolution, stride 1, channels-last: im2col over the
// whole batch and one GEMM gives the output in NHWC, whose bias is a row
// bias. The columns of the last forward are kept for backward's weight
// gradient, then overwritten by the columns' gradient.
class Conv2D final : public Layer {
 public:
  Conv2D(Shape in, int out, int k, Activation act) : in_(in), out_(out), k_(k), bias_(act) {}
  std::string kind() const override { return "conv"; }
  Shape output() const override { return {out_, in_.h, in_.w}; }
  int positions() const override { return bias_.positions(); }
  std::vector<ParamSpec> Params() const override {
    const int64_t fan_in = static_cast<int64_t>(in_.c) * k_ * k_;
    return {{"w", {out_, in_.c, k_, k_}, fan_in}, {"b", {out_}, fan_in}};
  }
  void Prepare(Backend& be, int max_batch) override {
    const int64_t pixels = static_cast<int64_t>(max_batch) * in_.h * in_.w;
    col_.Reset(be, be.Alloc(pixels * Patch()));
    bias_.Prepare(be, pixels * out_);
  }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& p) override {
    const int pixels = batch * in_.h * in_.w;
    be.Im2Col(batch, in_.h, in_.w, in_.c, k_, k_ / 2, x, col_.floats());
    // y (pixels x out) = col (pixels x patch) W^T (patch x out)
    be.Gemm(false, true, pixels, out_, Patch(), 1.0f, col_.floats(), p[0], 0.0f, y);
    bias_.Forward(be, pixels, out_, p[1], y);
  }
  void Backward(Backend& be, int batch, const float*, const float* y, const float* dy, float* dx,
                const std::vector<float*>& p, const std::vector<float*>& g) override {
    const int pixels = batch * in_.h * in_.w;
    const float* dz = bias_.Backward(be, pixels, out_, y, dy, g[1]);
    be.Gemm(true, false, out_, Patch(), pixels, 1.0f, dz, col_.floats(), 0.0f, g[0]);  // dW = dz^T col
    if (dx != nullptr) {
      be.Gemm(false, false, pixels, Patch(), out_, 1.0f, dz, p[0], 0.0f, col_.floats());  // dcol = dz W
      be.Col2Im(batch, in_.h, in_.w, in_.c, k_, k_ / 2, col_.floats(), dx);
    }
  }

 private:
  int Patch() const { return in_.c * k_ * k_; }
  const Shape in_;
  const int out_, k_;
  BiasAndActivation bias_;
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
    be.MaxPool2(batch, in_.h, in_.w, in_.c, x, y, argmax_.ints());
  }
  void Backward(Backend& be, int batch, const float*, const float*, const float* dy, float* dx,
                const std::vector<float*>&, const std::vector<float*>&) override {
    if (dx != nullptr) be.MaxPool2Grad(batch, in_.h, in_.w, in_.c, dy, argmax_.ints(), dx);
  }

 private:
  const Shape in_;
  Scratch argmax_;
};

// Channels-last samples (h*w x c) are written out in NCHW order (c x h*w),
// a transpose per sample; with one channel or one pixel that is a copy.
class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : in_(in) {}
  std::string kind() const override { return "flatten"; }
  Shape output() const override { return {static_cast<int>(in_.Size()), 1, 1}; }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>&) override {
    if (IsCopy()) return be.Copy(y, x, batch * in_.Size());
    be.TransposeBatched(batch, in_.h * in_.w, in_.c, x, y);
  }
  void Backward(Backend& be, int batch, const float*, const float*, const float* dy, float* dx,
                const std::vector<float*>&, const std::vector<float*>&) override {
    if (dx == nullptr) return;
    if (IsCopy()) return be.Copy(dx, dy, batch * in_.Size());
    be.TransposeBatched(batch, in_.c, in_.h * in_.w, dy, dx);
  }

 private:
  bool IsCopy() const { return in_.c == 1 || in_.h * in_.w == 1; }
  const Shape in_;
};

}  // namespace

std::unique_ptr<Layer> MakeDense(Shape in, int out, Activation act) { return std::make_unique<Dense>(in, out, act); }
std::unique_ptr<Layer> MakeRelu(Shape in) { return std::make_unique<Relu>(in); }
std::unique_ptr<Layer> MakeConv2D(Shape in, int out, int k, Activation act) {
  return std::make_unique<Conv2D>(in, out, k, act);
}
std::unique_ptr<Layer> MakeMaxPool2D(Shape in) { return std::make_unique<MaxPool2D>(in); }
std::unique_ptr<Layer> MakeFlatten(Shape in) { return std::make_unique<Flatten>(in); }

}  // namespace shardps
