// Replication of sparse tables (server/parameter_server_rows.cc): a
// table's rows as their primary left them after an update, which the copy
// installs whole, rows and slots.
#ifndef SHARDPS_SERVER_SPARSE_ROWS_REPLICA_H_
#define SHARDPS_SERVER_SPARSE_ROWS_REPLICA_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace shardps {

struct RowsReplica {
  int primary = 0;  // whose rows (common/table_spec.h RowServer)
  uint32_t table = 0;
  int64_t version = 0;  // of the primary's part of the table, after the update
  int row_floats = 0;   // the table's dim and slot floats
  std::shared_ptr<const std::vector<int64_t>> ids;   // the rows the update touched
  std::shared_ptr<const std::vector<float>> values;  // ids->size() * row_floats: each row, then its slots
  // Per worker rank, the last step whose push the rows include (a push of
  // that step or earlier, sent again after a failover, is a duplicate).
  std::vector<int64_t> last_pushed_step;
  // Re-replication: the last piece of a whole copy of `primary`'s rows to a
  // joining server (no rows of its own).
  bool copy_done = false;
  // A table that admits rows by count (--row_admit_count > 1): per id, -1
  // when the primary stores its row, else how many pushes have counted
  // toward storing it (its values are then unused: the copy counts, as the
  // primary does, and stores nothing). Null: every row is stored.
  std::shared_ptr<const std::vector<int32_t>> admission;

  int64_t Bytes() const {
    return static_cast<int64_t>(ids->size() * 8 + values->size() * 4 + (admission ? admission->size() * 4 : 0));
  }
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SPARSE_ROWS_REPLICA_H_
