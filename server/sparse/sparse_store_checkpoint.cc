// SparseStore's checkpoints (sparse_store.h): snapshots of its tables,
// exact at a sync step or as they stand, and tables put back from them.
#include <algorithm>
#include <limits>

#include "server/sparse/sparse_store.h"
#include "server/sparse/table_state.h"

namespace shardps {

int64_t SparseStore::MinVersion() const {
  absl::MutexLock lock(&install_mu_);
  if (tables_.empty()) return -1;
  int64_t v = std::numeric_limits<int64_t>::max();
  for (const auto& t : tables_) v = std::min(v, t->version.load());
  return v;
}

TableSnapshot SparseStore::Snapshot(TableState& t) {
  TableSnapshot s;
  s.version = t.version.load();
  const int dim = t.table.dim(), slots = t.table.slot_floats();
  s.ids.reserve(t.table.rows());
  s.rows.reserve(t.table.rows() * static_cast<size_t>(dim));
  s.slots.reserve(t.table.rows() * static_cast<size_t>(slots));
  t.table.ForEach([&](int64_t id, const float* row, const float* slot) {
    s.ids.push_back(id);
    s.rows.insert(s.rows.end(), row, row + dim);
    s.slots.insert(s.slots.end(), slot, slot + slots);
  });
  return s;
}

std::vector<TableSnapshot> SparseStore::Capture() const {
  absl::MutexLock lock(&install_mu_);
  std::vector<TableSnapshot> out;
  for (const auto& t : tables_) out.push_back(Snapshot(*t));
  return out;
}

void SparseStore::ArmCapture(int64_t step) {
  absl::MutexLock lock(&install_mu_);
  for (const auto& t : tables_) {
    absl::MutexLock table(&t->mu);
    t->captured.reset();
    t->capture_at = -1;
    const int64_t version = t->version.load();
    if (version == step) {
      t->captured = Snapshot(*t);
    } else if (version < step) {
      t->capture_at = step;
    }
  }
}

std::vector<TableSnapshot> SparseStore::CaptureAt(int64_t step) {
  absl::MutexLock lock(&install_mu_);
  std::vector<TableSnapshot> out;
  for (const auto& t : tables_) {
    absl::MutexLock table(&t->mu);
    if (t->captured.has_value() && t->captured->version == step) {
      out.push_back(*std::move(t->captured));
    } else {
      out.push_back(Snapshot(*t));
    }
    t->captured.reset();
  }
  return out;
}

void SparseStore::Restore(const std::vector<TableSnapshot>& tables, int64_t step) {
  // Each table's state is emptied in place, never replaced: the link thread
  // (NoteCopied), a metrics scrape (Stats) and WakeReady reach a table
  // without the server's rewind lock, and must not meet a freed one. No
  // row, pending push or capture survives from before; the counters do.
  absl::MutexLock lock(&install_mu_);
  for (size_t i = 0; i < tables_.size(); ++i) {
    TableState& t = *tables_[i];
    absl::MutexLock table(&t.mu);
    t.table.Clear();
    t.pending.clear();
    std::fill(t.last_pushed.begin(), t.last_pushed.end(), -1);
    t.capture_at = -1;
    t.captured.reset();
    t.copied.store(0);
    for (int r = 0; r < t.num_workers; ++r) t.copied_pushed[r].store(-1);
    t.step_seen = t.swept_at = step;
    t.table.TouchAt(step);  // restored rows start a fresh time to live
    int64_t version = 0;
    if (i < tables.size()) {
      const TableSnapshot& s = tables[i];
      const size_t dim = static_cast<size_t>(t.table.dim()), slots = static_cast<size_t>(t.table.slot_floats());
      version = s.version;
      for (size_t r = 0; r < s.ids.size(); ++r) {
        if (options_.num_servers > 1 && RowServer(s.ids[r], options_.num_servers) != options_.server_id) continue;
        t.table.Put(s.ids[r], s.rows.data() + r * dim, s.slots.data() + r * slots);
      }
    }
    t.version.store(options_.mode == Mode::kSync ? step : version);
  }
}

}  // namespace shardps
