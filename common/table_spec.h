// Sparse tables (DESIGN.md, "Sparse tables"): what a layout says about each
// embedding table, where a row lives, and the value a row starts from.
// Pure functions of their arguments; every process of a job computes the
// same placement and the same initial rows.
#ifndef SHARDPS_COMMON_TABLE_SPEC_H_
#define SHARDPS_COMMON_TABLE_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/shardps.pb.h"

namespace shardps {

// How a server updates a row from its gradient (server/sparse/row_optimizer.h).
enum class RowOptimizerKind {
  kSgd,
  kAdagrad,         // one accumulator per element, as torch.optim.Adagrad
  kRowwiseAdagrad,  // one accumulator per row (TorchRec's default)
  kLazyAdam,        // Adam whose moments advance only on the rows a push touches
};

struct TableSpec {
  std::string name;
  int32_t dim = 0;    // floats per row
  int64_t vocab = 0;  // 0: any int64 id; else ids in [0, vocab)
  float init_scale = 0.01f;  // a new row is uniform in [-init_scale, init_scale]
  RowOptimizerKind optimizer = RowOptimizerKind::kRowwiseAdagrad;
  float lr = 0.01f;
  uint64_t seed = 0;  // the job's seed: a new row's value depends on it

  bool operator==(const TableSpec& o) const {
    return name == o.name && dim == o.dim && vocab == o.vocab && init_scale == o.init_scale &&
           optimizer == o.optimizer && lr == o.lr && seed == o.seed;
  }
};

// "sgd", "adagrad", "rowwise_adagrad", "lazy_adam".
const char* RowOptimizerName(RowOptimizerKind kind);
absl::StatusOr<RowOptimizerKind> ParseRowOptimizer(absl::string_view name);

// INVALID_ARGUMENT naming the table when a field is out of range.
absl::Status CheckTableSpec(const TableSpec& spec);

absl::StatusOr<TableSpec> TableSpecFromProto(const wire::TableSpec& proto);
wire::TableSpec TableSpecToProto(const TableSpec& spec);

// The server that holds row `id` of every table: a hash of the id, so each
// server holds an even share of every table whatever the ids' distribution.
int RowServer(int64_t id, int num_servers);

// The value row `id` of `spec` starts from (spec.dim floats into `out`): a
// function of (table name, id, seed) only, so every server, and a server
// after a restart, makes the same row.
void InitialRow(const TableSpec& spec, int64_t id, float* out);

// A 64-bit mix (splitmix64's finaliser): spreads nearby ids over all bits.
inline uint64_t MixId(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_TABLE_SPEC_H_
