// What a worker does with a batch's ids before they go on the wire
// (DESIGN.md, "Sparse tables"): repeated ids become one, their gradients
// summed, and the distinct ids are sorted by the server that holds them.
// Pure functions.
#ifndef SHARDPS_CLIENT_ROW_BATCHES_H_
#define SHARDPS_CLIENT_ROW_BATCHES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardps {

// The distinct ids of a batch, each server's in one run.
struct RowPlan {
  std::vector<int64_t> ids;          // distinct, grouped by server
  std::vector<size_t> server_begin;  // server s's ids are ids[server_begin[s]..server_begin[s+1])
  // For each position of the caller's batch, the index of its id in `ids`.
  std::vector<uint32_t> slot_of;
  // Whether slot_of[i] == i for every i: the batch's ids are distinct and
  // already in server order (one server and ascending ids, say), so its
  // rows need no summing or scattering.
  bool identity = false;
};

RowPlan PlanRows(const int64_t* ids, size_t n, int num_servers);

// The gradients of plan.ids in order: the rows of repeated ids summed.
// `grads` holds n rows of `dim`.
std::vector<float> SumRows(const RowPlan& plan, const float* grads, size_t n, int dim);

// Copies pulled rows (plan.ids order) to each position of the caller's
// batch: out[i] = rows[slot_of[i]].
void ScatterRows(const RowPlan& plan, const float* rows, int dim, float* out);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_ROW_BATCHES_H_
