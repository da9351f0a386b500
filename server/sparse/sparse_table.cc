#include "server/sparse/sparse_table.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

namespace shardps {

namespace {
RowOptimizerParams ParamsOf(const TableSpec& spec) {
  RowOptimizerParams p;
  p.kind = spec.optimizer;
  p.dim = spec.dim;
  p.lr = spec.lr;
  return p;
}
}  // namespace

SparseTable::SparseTable(const TableSpec& spec, int admit_count)
    : spec_(spec),
      slots_(RowSlotFloats(spec.optimizer, spec.dim)),
      stride_(static_cast<size_t>(spec.dim + slots_)),
      params_(ParamsOf(spec)),
      admit_count_(static_cast<uint32_t>(std::max(admit_count, 1))) {}

float* SparseTable::RowOf(Stripe& s, int64_t id) {
  const int32_t now = touch_step_.load(std::memory_order_relaxed);
  if (auto it = s.index.find(id); it != s.index.end()) {
    it->second.touched = now;
    return RowAt(s, it->second.row);
  }
  uint32_t r;
  if (!s.free.empty()) {
    r = s.free.back();
    s.free.pop_back();
  } else {
    r = s.used++;
    if (r % kRowsPerSlab == 0) s.slabs.emplace_back(new float[kRowsPerSlab * stride_]);
  }
  s.index.emplace(id, Place{r, now});
  float* row = RowAt(s, r);
  InitialRow(spec_, id, row);
  std::memset(row + spec_.dim, 0, slots_ * sizeof(float));
  rows_.fetch_add(1, std::memory_order_relaxed);
  created_.fetch_add(1, std::memory_order_relaxed);
  return row;
}

float* SparseTable::AdmittedRowOf(Stripe& s, int64_t id, bool pushed) {
  if (admit_count_ <= 1 || s.index.contains(id)) return RowOf(s, id);
  if (!pushed) return nullptr;
  auto [it, inserted] = s.seen.try_emplace(id, 0);
  if (inserted) waiting_.fetch_add(1, std::memory_order_relaxed);
  if (++it->second < admit_count_) return nullptr;
  s.seen.erase(it);
  waiting_.fetch_sub(1, std::memory_order_relaxed);
  return RowOf(s, id);
}

int64_t SparseTable::Evict(int64_t step) {
  int64_t dropped = 0;
  for (Stripe& s : stripes_) {
    absl::MutexLock lock(&s.mu);
    waiting_.fetch_sub(static_cast<int64_t>(s.seen.size()), std::memory_order_relaxed);
    s.seen.clear();  // counts toward admission start again at each sweep
    for (auto it = s.index.begin(); it != s.index.end();) {
      if (it->second.touched >= step) {
        ++it;
        continue;
      }
      s.free.push_back(it->second.row);
      s.index.erase(it++);
      ++dropped;
    }
  }
  rows_.fetch_sub(dropped, std::memory_order_relaxed);
  evicted_.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

void SparseTable::Clear() {
  for (Stripe& s : stripes_) {
    absl::MutexLock lock(&s.mu);
    rows_.fetch_sub(static_cast<int64_t>(s.index.size()), std::memory_order_relaxed);
    waiting_.fetch_sub(static_cast<int64_t>(s.seen.size()), std::memory_order_relaxed);
    s.index.clear();
    s.seen.clear();
    s.slabs.clear();
    s.free.clear();
    s.used = 0;
  }
}

void SparseTable::GroupByStripe(const int64_t* ids, size_t n, std::vector<uint32_t>& order,
                                std::array<uint32_t, kStripes + 1>& begin) const {
  std::vector<uint8_t> stripe(n);
  std::array<uint32_t, kStripes> count{};
  for (size_t i = 0; i < n; ++i) {
    stripe[i] = static_cast<uint8_t>(StripeOf(ids[i]));
    ++count[stripe[i]];
  }
  begin[0] = 0;
  for (int k = 0; k < kStripes; ++k) begin[k + 1] = begin[k] + count[k];
  std::array<uint32_t, kStripes> next;
  std::memcpy(next.data(), begin.data(), sizeof(next));
  order.resize(n);
  for (size_t i = 0; i < n; ++i) order[next[stripe[i]]++] = static_cast<uint32_t>(i);
}

template <typename Fn>
void SparseTable::ForRows(const int64_t* ids, size_t n, bool pushed, Fn&& fn) {
  constexpr uint32_t kAhead = 8;        // rows prefetched ahead of the one visited
  constexpr uint32_t kLookAhead = 16;  // map slots prefetched ahead of the id looked up
  std::vector<uint32_t> order;
  std::array<uint32_t, kStripes + 1> begin;
  GroupByStripe(ids, n, order, begin);
  std::vector<float*> rows;
  const size_t row_bytes = stride_ * sizeof(float);
  for (int k = 0; k < kStripes; ++k) {
    if (begin[k] == begin[k + 1]) continue;
    Stripe& s = stripes_[k];
    absl::MutexLock lock(&s.mu);
    rows.clear();
    for (uint32_t j = begin[k]; j < begin[k + 1]; ++j) {
      if (j + kLookAhead < begin[k + 1]) s.index.prefetch(ids[order[j + kLookAhead]]);
      rows.push_back(AdmittedRowOf(s, ids[order[j]], pushed));
    }
    for (uint32_t j = 0; j < rows.size(); ++j) {
      if (j + kAhead < rows.size() && rows[j + kAhead] != nullptr) {
        const char* ahead = reinterpret_cast<const char*>(rows[j + kAhead]);
        for (size_t line = 0; line < row_bytes; line += 64) __builtin_prefetch(ahead + line, pushed ? 1 : 0);
      }
      fn(rows[j], order[begin[k] + j]);
    }
  }
}

void SparseTable::Read(const int64_t* ids, size_t n, float* out) {
  const size_t dim = static_cast<size_t>(spec_.dim);
  ForRows(ids, n, /*pushed=*/false, [&](const float* row, size_t i) {
    if (row != nullptr) {
      std::memcpy(out + i * dim, row, dim * sizeof(float));
    } else {
      InitialRow(spec_, ids[i], out + i * dim);  // not admitted yet
    }
  });
}

void SparseTable::Apply(const int64_t* ids, size_t n, const float* grads, float grad_scale, float lr_share) {
  const size_t dim = static_cast<size_t>(spec_.dim);
  ForRows(ids, n, /*pushed=*/true, [&](float* row, size_t i) {
    if (row != nullptr) ApplyRow(params_, row, row + dim, grads + i * dim, grad_scale, lr_share);
  });
}

void SparseTable::ForEach(const std::function<void(int64_t, const float*, const float*)>& fn) {
  for (Stripe& s : stripes_) {
    absl::MutexLock lock(&s.mu);
    for (const auto& [id, place] : s.index) {
      const float* row = RowAt(s, place.row);
      fn(id, row, row + spec_.dim);
    }
  }
}

void SparseTable::Put(int64_t id, const float* row, const float* slots) {
  Stripe& s = stripes_[StripeOf(id)];
  absl::MutexLock lock(&s.mu);
  const bool is_new = !s.index.contains(id);
  if (is_new && s.seen.erase(id) > 0) waiting_.fetch_sub(1, std::memory_order_relaxed);  // counted here until now
  float* dst = RowOf(s, id);
  if (is_new) created_.fetch_sub(1, std::memory_order_relaxed);  // restored, not created
  std::memcpy(dst, row, spec_.dim * sizeof(float));
  if (slots_ > 0) std::memcpy(dst + spec_.dim, slots, slots_ * sizeof(float));  // SGD's `slots` may be null
}

void SparseTable::Export(const int64_t* ids, size_t n, float* out, int32_t* admission) {
  const size_t dim = static_cast<size_t>(spec_.dim);
  ForRows(ids, n, /*pushed=*/false, [&](const float* row, size_t i) {
    float* dst = out + i * stride_;
    if (row != nullptr) {
      std::memcpy(dst, row, stride_ * sizeof(float));
    } else {
      InitialRow(spec_, ids[i], dst);
      std::memset(dst + dim, 0, slots_ * sizeof(float));
    }
    if (admission == nullptr) return;
    if (row != nullptr) {
      admission[i] = -1;
      return;
    }
    // ForRows holds the id's stripe locked while it visits the id.
    const Stripe& s = stripes_[StripeOf(ids[i])];
    const auto seen = s.seen.find(ids[i]);
    admission[i] = seen == s.seen.end() ? 0 : static_cast<int32_t>(seen->second);
  });
}

void SparseTable::PutWaiting(int64_t id, uint32_t pushes) {
  Stripe& s = stripes_[StripeOf(id)];
  absl::MutexLock lock(&s.mu);
  // Stored here: the primary dropped it at an eviction sweep (which forgets
  // its count), and this copy's own sweep drops it too.
  if (s.index.contains(id)) return;
  if (pushes == 0) {
    if (s.seen.erase(id) > 0) waiting_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  auto [it, inserted] = s.seen.try_emplace(id, pushes);
  if (inserted) {
    waiting_.fetch_add(1, std::memory_order_relaxed);
  } else {
    it->second = pushes;
  }
}

void SparseTable::ForEachWaiting(const std::function<void(int64_t, uint32_t)>& fn) {
  for (Stripe& s : stripes_) {
    absl::MutexLock lock(&s.mu);
    for (const auto& [id, pushes] : s.seen) fn(id, pushes);
  }
}

int64_t SparseTable::bytes() const {
  int64_t total = 0;
  for (const Stripe& s : stripes_) {
    absl::MutexLock lock(&s.mu);
    total += static_cast<int64_t>(s.slabs.size()) * kRowsPerSlab * stride_ * sizeof(float);
    total += static_cast<int64_t>(s.free.capacity() * sizeof(uint32_t));
    total += static_cast<int64_t>(s.seen.capacity()) * (sizeof(std::pair<int64_t, uint32_t>) + 1);
    // flat_hash_map: one slot (16 bytes) and one control byte per bucket.
    total += static_cast<int64_t>(s.index.capacity()) * (sizeof(std::pair<int64_t, Place>) + 1);
  }
  return total;
}

bool DistinctAscending(const std::vector<int64_t>& ids) {
  return std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<int64_t>()) == ids.end();
}

void SumRowsById(const std::vector<IdRows>& parts, size_t dim, std::vector<int64_t>& ids, std::vector<float>& sums) {
  size_t total = 0;
  for (const IdRows& p : parts) total += p.ids->size();
  absl::flat_hash_map<int64_t, uint32_t> at;
  at.reserve(total);
  ids.clear();
  ids.reserve(total);
  sums.clear();
  sums.reserve(total * dim);
  for (const IdRows& p : parts) {
    for (size_t i = 0; i < p.ids->size(); ++i) {
      auto [it, inserted] = at.try_emplace((*p.ids)[i], static_cast<uint32_t>(ids.size()));
      if (inserted) {
        ids.push_back((*p.ids)[i]);
        sums.resize(sums.size() + dim, 0.0f);
      }
      float* sum = sums.data() + it->second * dim;
      const float* row = p.rows->data() + i * dim;
      for (size_t j = 0; j < dim; ++j) sum[j] += row[j];
    }
  }
}

void MergeRepeatedIds(std::vector<int64_t>& ids, std::vector<float>& rows, size_t dim) {
  if (DistinctAscending(ids)) return;
  std::vector<int64_t> merged_ids;
  std::vector<float> merged_rows;
  SumRowsById({{&ids, &rows}}, dim, merged_ids, merged_rows);
  ids = std::move(merged_ids);
  rows = std::move(merged_rows);
}

}  // namespace shardps
