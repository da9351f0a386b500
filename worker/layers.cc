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

// Same-padding k x k convolution, stride 1: im2col over the whole batch and
// one GEMM, computed channel-major (CNHW) and swapped back to NCHW.
class Conv2D final : public Layer {
 public:
  Conv2D(Shape in, int out, int k) : in_(in), out_(out), k_(k) {}
  std::string kind() const override { return "conv"; }
  Shape output() const override { return {out_, in_.h, in_.w}; }
  std::vector<ParamSpec> Params() const override {
    const int64_t fan_in = static_cast<int64_t>(in_.c) * k_ * k_;
    return {{"w", {out_, in_.c, k_, k_}, fan_in}, {"b", {out_}, fan_in}};
  }
  void Prepare(Backend& be, int max_batch) override {
    const int64_t spatial = static_cast<int64_t>(in_.h) * in_.w;
    col_.Reset(be, be.Alloc(Patch() * max_batch * spatial));
    channel_major_.Reset(be, be.Alloc(static_cast<int64_t>(out_) * max_batch * spatial));
  }
  void Forward(Backend& be, int batch, const float* x, float* y, const std::vector<float*>& p) override {
    const int spatial = in_.h * in_.w;
    be.Im2Col(batch, in_.c, in_.h, in_.w, k_, k_ / 2, x, col_.floats());
    // y (out x batch*spatial) = W (out x patch) col (patch x batch*spatial)
    be.Gemm(false, false, out_, batch * spatial, Patch(), 1.0f, p[0], col_.floats(), 0.0f, channel_major_.floats());
    be.SwapLeadingAxes(out_, batch, spatial, channel_major_.floats(), y);
    be.AddChannelBias(batch, out_, spatial, p[1], y);
  }
  void Backward(Backend& be, int batch, const float* x, const float*, const float* dy, float* dx,
                const std::vector<float*>& p, const std::vector<float*>& g) override {
    const int spatial = in_.h * in_.w;
    float* dy_cm = channel_major_.floats();
    be.SwapLeadingAxes(batch, out_, spatial, dy, dy_cm);
    be.Im2Col(batch, in_.c, in_.h, in_.w, k_, k_ / 2, x, col_.floats());
    be.Gemm(false, true, out_, Patch(), batch * spatial, 1.0f, dy_cm, col_.floats(), 0.0f, g[0]);  // dW = dy col^T
    be.ChannelBiasGrad(batch, out_, spatial, dy, g[1]);
    if (dx != nullptr) {
      be.Gemm(true, false, Patch(), batch * spatial, out_, 1.0f, p[0], dy_cm, 0.0f, col_.floats());  // dcol = W^T dy
      be.Col2Im(batch, in_.c, in_.h, in_.w, k_, k_ / 2, col_.floats(), dx);
    }
  }

 private:
  int Patch() const { return in_.c * k_ * k_; }
  const Shape in_;
  const int out_, k_;
  Scratch col_, channel_major_;
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
