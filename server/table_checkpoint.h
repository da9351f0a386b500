// Sparse tables in a shard checkpoint: the tables' specs in the metadata
// (so the restored layout, and its hash, are the job's), and each table's
// rows as "<table>.ids" (I64), "<table>.rows" (F32, n x dim) and
// "<table>.slots" (F32, n x slot floats; absent for SGD).
#ifndef SHARDPS_SERVER_TABLE_CHECKPOINT_H_
#define SHARDPS_SERVER_TABLE_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/table_spec.h"
#include "server/safetensors.h"
#include "server/sparse/sparse_table.h"

namespace shardps {

// "name:dim:vocab:init_scale:optimizer:lr:seed;..." with floats as their
// bits in hex, so a spec comes back bit for bit.
std::string EncodeTables(const std::vector<TableSpec>& tables);
absl::StatusOr<std::vector<TableSpec>> DecodeTables(const std::string& text);

// Appends the tables' tensors (borrowing `snapshots`) and their versions
// ("table_versions" in `metadata`).
void AddTableTensors(const std::vector<TableSpec>& tables, const std::vector<TableSnapshot>& snapshots,
                     std::vector<TensorView>& tensors, std::map<std::string, std::string>& metadata);
// DATA_LOSS naming what is missing or of the wrong shape.
absl::StatusOr<std::vector<TableSnapshot>> ReadTableTensors(const std::vector<TableSpec>& tables,
                                                            SafetensorsFile& file);

}  // namespace shardps

#endif  // SHARDPS_SERVER_TABLE_CHECKPOINT_H_
