// A lock-free maximum: raises an atomic counter to a value unless it holds
// more already (the last step seen, the largest staleness, what a copy
// has acknowledged).
#ifndef SHARDPS_COMMON_ATOMIC_MAX_H_
#define SHARDPS_COMMON_ATOMIC_MAX_H_

#include <atomic>
#include <cstdint>

namespace shardps {

// Sets `a` to max(a, v) and returns the value it held before. `order`:
// std::memory_order_seq_cst or std::memory_order_relaxed.
inline int64_t RaiseTo(std::atomic<int64_t>& a, int64_t v, std::memory_order order = std::memory_order_seq_cst) {
  int64_t seen = a.load(order);
  while (v > seen && !a.compare_exchange_weak(seen, v, order)) {
  }
  return seen;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_ATOMIC_MAX_H_
