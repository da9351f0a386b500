// Treats denormal floats as zero while in scope, on this thread. Optimizer
// state decays towards zero (momentum buffers, a learning rate annealed to
// 0) and arithmetic on denormals is many times slower on x86; their values
// are far below float32's precision of any weight.
#ifndef SHARDPS_SERVER_FLUSH_DENORMALS_H_
#define SHARDPS_SERVER_FLUSH_DENORMALS_H_

#include <xmmintrin.h>

namespace shardps {

class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  const unsigned saved_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_FLUSH_DENORMALS_H_
