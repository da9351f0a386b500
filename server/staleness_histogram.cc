#include "server/staleness_histogram.h"

namespace shardps {

StalenessHistogram::Counts StalenessHistogram::Read() const {
  Counts c;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    c.per_bucket[b] = buckets_[b].load(std::memory_order_relaxed);
    c.count += c.per_bucket[b];
  }
  c.sum = sum_.load(std::memory_order_relaxed);
  c.max = max_.load(std::memory_order_relaxed);
  return c;
}

int64_t StalenessHistogram::Counts::Quantile(double fraction) const {
  if (count == 0) return 0;
  int64_t seen = 0;
  for (size_t b = 0; b < per_bucket.size(); ++b) {
    seen += per_bucket[b];
    if (seen >= fraction * count) return b < kBounds.size() ? kBounds[b] : -1;
  }
  return -1;
}

std::string StalenessHistogram::Counts::BucketWords() const {
  std::string words;
  for (size_t b = 0; b < per_bucket.size(); ++b) {
    if (per_bucket[b] == 0) continue;
    if (!words.empty()) words += ' ';
    words += b < kBounds.size() ? std::to_string(kBounds[b]) : std::string("inf");
    words += ':' + std::to_string(per_bucket[b]);
  }
  return words;
}

StalenessHistogram::Counts StalenessHistogram::Counts::Minus(const Counts& earlier) const {
  Counts d;
  for (size_t b = 0; b < per_bucket.size(); ++b) d.per_bucket[b] = per_bucket[b] - earlier.per_bucket[b];
  d.count = count - earlier.count;
  d.sum = sum - earlier.sum;
  d.max = max;  // the largest since the start: a maximum does not subtract
  return d;
}

}  // namespace shardps
