// FastDivmod (kernels/fast_divmod.h) against the `/` and `%` it replaces in
// the CUDA kernels: every divisor up to 4096 and the shapes' own divisors,
// over small dividends, random ones and the largest the kernels use.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/fast_divmod.h"

namespace shardps {
namespace {

void RequireExact(uint32_t d, uint32_t n) {
  const FastDivmod f(d);
  uint32_t q, r;
  f.DivMod(n, q, r);
  if (q != n / d || r != n % d) {
    INFO("divisor " << d << " dividend " << n << ": got " << q << " r " << r);
    REQUIRE(q == n / d);
    REQUIRE(r == n % d);
  }
}

TEST_CASE("fast division is exact for every divisor up to 4096", "[divmod]") {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
  for (uint32_t d = 1; d <= 4096; ++d) {
    for (uint32_t n = 0; n < 3 * d + 5; ++n) RequireExact(d, n);
    for (int i = 0; i < 200; ++i) RequireExact(d, any(rng));
    RequireExact(d, (1u << 31) - 1);
  }
}

TEST_CASE("fast division is exact for large and power-of-two divisors near 2^31", "[divmod]") {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
  const std::vector<uint32_t> divisors = {784, 401408, 100352, (1u << 20) + 1, (1u << 30) - 1, 1u << 30,
                                          (1u << 31) - 1, 1u << 31};
  for (uint32_t d : divisors) {
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, (1u << 31) - 1, (1u << 31) - 2}) RequireExact(d, n);
    for (int i = 0; i < 100000; ++i) RequireExact(d, any(rng));
  }
}

}  // namespace
}  // namespace shardps
