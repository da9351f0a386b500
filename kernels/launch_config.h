// Grid sizes shared by the kernel launchers. Element-wise kernels use
// grid-stride loops, so the grid is capped and any size is covered.
#ifndef SHARDPS_KERNELS_LAUNCH_CONFIG_H_
#define SHARDPS_KERNELS_LAUNCH_CONFIG_H_

#include <algorithm>
#include <cstdint>

namespace shardps {

constexpr int kThreadsPerBlock = 256;

inline unsigned BlocksFor(int64_t elements) {
  const int64_t blocks = (elements + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 1 << 20));
}

}  // namespace shardps

#endif  // SHARDPS_KERNELS_LAUNCH_CONFIG_H_
