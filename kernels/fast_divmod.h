// Division by a divisor fixed at launch: quotient and remainder from one
// multiply-high, an add and a shift (Granlund and Montgomery, "Division by
// invariant integers using multiplication"), in place of the dozens of
// instructions a GPU spends on a 32-bit `/` or `%`. Built on the host,
// passed to kernels by value. Exact for dividends 0 <= n < 2^31.
// Header-only and usable from host code, so tests/fast_divmod_test checks it
// on the CPU.
#ifndef SHARDPS_KERNELS_FAST_DIVMOD_H_
#define SHARDPS_KERNELS_FAST_DIVMOD_H_

#include <cstdint>

#ifdef __CUDACC__
#define SHARDPS_HOST_DEVICE __host__ __device__
#else
#define SHARDPS_HOST_DEVICE
#endif

namespace shardps {

class FastDivmod {
 public:
  FastDivmod() = default;
  // REQUIRES: divisor >= 1.
  explicit FastDivmod(uint32_t divisor) : divisor_(divisor) {
    while ((uint64_t{1} << shift_) < divisor) ++shift_;  // shift = ceil(log2(divisor))
    multiplier_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift_) - divisor)) / divisor + 1);
  }
  SHARDPS_HOST_DEVICE uint32_t divisor() const { return divisor_; }
  SHARDPS_HOST_DEVICE uint32_t Div(uint32_t n) const { return (MulHi(n, multiplier_) + n) >> shift_; }
  // q = n / divisor, r = n % divisor.
  SHARDPS_HOST_DEVICE void DivMod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = Div(n);
    r = n - q * divisor_;
  }

 private:
  static SHARDPS_HOST_DEVICE uint32_t MulHi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }

  uint32_t divisor_ = 1;
  uint32_t multiplier_ = 1;
  uint32_t shift_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_KERNELS_FAST_DIVMOD_H_
