#include "client/row_batches.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "common/table_spec.h"

namespace shardps {

namespace {

// Whether ids[0..n) ascend strictly (distinct already: torch.unique's and a
// coalesced sparse gradient's indices are).
bool StrictlyAscending(const int64_t* ids, size_t n) {
  for (size_t i = 1; i < n; ++i) {
    if (ids[i] <= ids[i - 1]) return false;
  }
  return true;
}

}  // namespace

RowPlan PlanRows(const int64_t* ids, size_t n, int num_servers) {
  RowPlan plan;
  if (num_servers == 1 && StrictlyAscending(ids, n)) {
    // One server holds every row: the batch goes as it came.
    plan.ids.assign(ids, ids + n);
    plan.server_begin = {0, n};
    plan.slot_of.resize(n);
    for (size_t i = 0; i < n; ++i) plan.slot_of[i] = static_cast<uint32_t>(i);
    plan.identity = true;
    return plan;
  }
  plan.slot_of.resize(n);
  // First pass: distinct ids in first-seen order, and each one's server
  // (no hash map when the ids are distinct already).
  std::vector<int64_t> distinct;
  std::vector<int> server;
  std::vector<uint32_t> first_index(n);
  if (StrictlyAscending(ids, n)) {
    distinct.assign(ids, ids + n);
    server.resize(n);
    for (size_t i = 0; i < n; ++i) {
      server[i] = RowServer(ids[i], num_servers);
      first_index[i] = static_cast<uint32_t>(i);
    }
  } else {
    absl::flat_hash_map<int64_t, uint32_t> seen;
    seen.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      auto [it, inserted] = seen.try_emplace(ids[i], static_cast<uint32_t>(distinct.size()));
      if (inserted) {
        distinct.push_back(ids[i]);
        server.push_back(RowServer(ids[i], num_servers));
      }
      first_index[i] = it->second;
    }
  }
  // Second pass: a counting sort of the distinct ids by server.
  plan.server_begin.assign(num_servers + 1, 0);
  for (int s : server) ++plan.server_begin[s + 1];
  for (int s = 0; s < num_servers; ++s) plan.server_begin[s + 1] += plan.server_begin[s];
  std::vector<size_t> next(plan.server_begin.begin(), plan.server_begin.end() - 1);
  std::vector<uint32_t> position(distinct.size());
  plan.ids.resize(distinct.size());
  for (size_t d = 0; d < distinct.size(); ++d) {
    position[d] = static_cast<uint32_t>(next[server[d]]++);
    plan.ids[position[d]] = distinct[d];
  }
  plan.identity = plan.ids.size() == n;
  for (size_t i = 0; i < n; ++i) {
    plan.slot_of[i] = position[first_index[i]];
    plan.identity = plan.identity && plan.slot_of[i] == i;
  }
  return plan;
}

std::vector<float> SumRows(const RowPlan& plan, const float* grads, size_t n, int dim) {
  std::vector<float> sums(plan.ids.size() * static_cast<size_t>(dim), 0.0f);
  for (size_t i = 0; i < n; ++i) {
    float* dst = sums.data() + static_cast<size_t>(plan.slot_of[i]) * dim;
    const float* src = grads + i * static_cast<size_t>(dim);
    for (int j = 0; j < dim; ++j) dst[j] += src[j];
  }
  return sums;
}

void ScatterRows(const RowPlan& plan, const float* rows, int dim, float* out) {
  const size_t bytes = static_cast<size_t>(dim) * sizeof(float);
  for (size_t i = 0; i < plan.slot_of.size(); ++i) {
    std::memcpy(out + i * static_cast<size_t>(dim), rows + static_cast<size_t>(plan.slot_of[i]) * dim, bytes);
  }
}

}  // namespace shardps
