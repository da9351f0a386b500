// Async and ssp: how stale the pushes a server applies are. A push's
// staleness is its key's version when it arrives minus the version its
// worker last pulled of that key: the updates the worker did not see.
// Counts them in buckets (0..16 one by one, then 24, 32, 48, 64, 96, 128,
// 256, 512, 1024, then everything above), for the Prometheus histogram and
// the server's log lines.
//
// Thread-safe.
#ifndef SHARDPS_SERVER_STALENESS_HISTOGRAM_H_
#define SHARDPS_SERVER_STALENESS_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/atomic_max.h"

namespace shardps {

class StalenessHistogram {
 public:
  // Upper bounds (inclusive) of the buckets; the last bucket has none.
  static constexpr std::array<int64_t, 26> kBounds = {0,  1,  2,  3,  4,  5,  6,  7,  8,   9,   10,  11,  12,
                                                      13, 14, 15, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024};

  struct Counts {
    std::vector<int64_t> per_bucket = std::vector<int64_t>(kBounds.size() + 1, 0);
    int64_t count = 0;
    int64_t sum = 0;
    int64_t max = 0;
    // The smallest bucket bound that at least `fraction` of the pushes are
    // at or below (a bucket's bound; -1 for the unbounded bucket, 0 if empty).
    int64_t Quantile(double fraction) const;
    Counts Minus(const Counts& earlier) const;
    // The non-empty buckets as "bound:count" words, the unbounded one as
    // "inf:count" (the servers' last log line; bench/time_to_accuracy adds
    // them up over servers).
    std::string BucketWords() const;
  };

  void Add(int64_t staleness) {
    size_t b = 0;
    while (b < kBounds.size() && staleness > kBounds[b]) ++b;
    buckets_[b].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(staleness, std::memory_order_relaxed);
    RaiseTo(max_, staleness);
  }
  // Since the start.
  Counts Read() const;

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<int64_t> sum_{0}, max_{0};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_STALENESS_HISTOGRAM_H_
