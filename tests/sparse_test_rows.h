// For the sparse-table tests at store level: a store's options with every
// worker live, a table spec whose rows start at zero and move by exactly lr x
// gradient, and ids and rows as the wire carries them.
#ifndef SHARDPS_TESTS_SPARSE_TEST_ROWS_H_
#define SHARDPS_TESTS_SPARSE_TEST_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/table_spec.h"
#include "server/sparse/sparse_store.h"

namespace shardps {

// A store's options in `mode` with `workers` workers, each of them required
// for every sync step and none behind (the slowest live clock is 0): the
// test drives the steps itself.
inline SparseStoreOptions LiveStoreOptions(Mode mode, int workers) {
  SparseStoreOptions o;
  o.mode = mode;
  o.num_workers = workers;
  o.required_for_step = [workers](int64_t) { return std::vector<bool>(workers, true); };
  o.min_live_clock = [] { return int64_t{0}; };
  return o;
}

inline TableSpec ExactSpec(RowOptimizerKind kind = RowOptimizerKind::kSgd, int dim = 2) {
  TableSpec t;
  t.name = "emb";
  t.dim = dim;
  t.init_scale = 0;  // rows start at zero: exact expected values
  t.optimizer = kind;
  t.lr = 1.0f;
  return t;
}

inline std::string Bytes(const std::vector<int64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}
inline std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

}  // namespace shardps

#endif  // SHARDPS_TESTS_SPARSE_TEST_ROWS_H_
