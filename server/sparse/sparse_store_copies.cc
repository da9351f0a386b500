// SparseStore: replication's side (--replicas > 1). The primary's store
// hands each update's rows to its server (a sync step's in FinishStep, an
// async or ssp push's in ApplyPushForCopy: SparseStoreOptions.on_step_applied),
// which forwards them to the next copy (server/parameter_server_rows.cc);
// here what such a copy holds (CopyOf), the acknowledgement that lets pulls
// read that version and pushes be answered (NoteCopied, AwaitCopied), the
// copy's install of the rows it receives, and the whole copy for a joining
// server.
#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/atomic_max.h"
#include "common/replica_map.h"
#include "server/sparse/sparse_store.h"
#include "server/sparse/table_state.h"

namespace shardps {

void SparseStore::NoteCopied(uint32_t table, int64_t version, const std::vector<int64_t>& pushed) {
  absl::StatusOr<TableState*> t = TableAt(table);
  if (!t.ok()) return;
  RaiseTo((*t)->copied, version);
  for (size_t r = 0; r < pushed.size() && r < static_cast<size_t>((*t)->num_workers); ++r) {
    RaiseTo((*t)->copied_pushed[r], pushed[r]);
  }
  WakeReady();
}

RowsReplica SparseStore::CopyOf(TableState& t, const int64_t* ids, size_t n) const {
  auto values = std::make_shared<std::vector<float>>(n * static_cast<size_t>(t.table.row_floats()));
  std::shared_ptr<std::vector<int32_t>> admission;
  if (t.table.admits_by_count()) admission = std::make_shared<std::vector<int32_t>>(n);
  t.table.Export(ids, n, values->data(), admission ? admission->data() : nullptr);
  RowsReplica copy{options_.server_id, t.index, t.version.load(), t.table.row_floats(),
                   std::make_shared<const std::vector<int64_t>>(ids, ids + n), std::move(values),
                   IncludedPushes(t)};
  copy.admission = std::move(admission);
  return copy;
}

std::vector<int64_t> SparseStore::IncludedPushes(const TableState& t) const {
  // Sync: every rank's pushes of the steps applied, not those buffered for
  // later steps. Async and ssp apply each push as it comes.
  if (options_.mode == Mode::kSync) return std::vector<int64_t>(t.last_pushed.size(), t.version.load() - 1);
  return t.last_pushed;
}

bool SparseStore::CopyHas(const TableState& t, int64_t version) const {
  return t.copied.load() >= version || !WaitsForCopy();
}

bool SparseStore::PushCopied(const TableState& t, int rank, int64_t step) const {
  if (!WaitsForCopy()) return true;
  const int64_t included = step - KeptPushSteps(/*sync=*/false) - kExtraKeptRowSteps;
  return rank < 0 || rank >= t.num_workers || t.copied_pushed[rank].load() >= included;
}

void SparseStore::AwaitCopied(int rank, int64_t step, const std::vector<Part>& parts, absl::Time deadline,
                              std::function<void(absl::Status)> done) {
  std::vector<WaitingPull> waits;
  for (const Part& p : parts) {
    const bool seen = std::any_of(waits.begin(), waits.end(), [&](const WaitingPull& w) { return w.table == p.table; });
    if (!TableAt(p.table).ok() || seen) continue;
    WaitingPull& wait = waits.emplace_back(WaitingPull{p.table, step, {}, deadline, nullptr});
    wait.ack_only = true;
    wait.rank = rank;
  }
  AnswerAll(std::move(waits), [done = std::move(done)](absl::StatusOr<std::vector<PulledRows>> answered) {
    done(answered.status());
  });
}

absl::Status SparseStore::InstallCopy(const RowsReplica& copy) {
  const std::vector<int64_t>& ids = *copy.ids;
  const std::vector<float>& values = *copy.values;
  const int row_floats = copy.row_floats;
  const int64_t version = copy.version;
  absl::StatusOr<TableState*> found = TableAt(copy.table);
  if (!found.ok()) return absl::InvalidArgumentError(found.status().message());
  TableState& t = **found;
  const int want = t.table.row_floats();
  if (row_floats != want || values.size() != ids.size() * static_cast<size_t>(want)) {
    return absl::InvalidArgumentError(absl::StrCat("copy of table '", t.table.spec().name, "' rows: ", row_floats,
                                                   " floats a row; the table's rows have ", want));
  }
  const std::vector<int32_t>* admission = copy.admission.get();
  if (admission != nullptr && admission->size() != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("copy of table '", t.table.spec().name, "' rows: ",
                                                   admission->size(), " admission counts for ", ids.size(), " ids"));
  }
  // The rows come as the primary's latest push left them: stamped with
  // that step, they age (--row_ttl_steps) as they do on the primary. A
  // backup sees no step of its own until it serves; stamped 0, every row
  // copied would be swept at its first step after a failover.
  const int64_t newest = copy.last_pushed_step.empty()
                             ? -1
                             : *std::max_element(copy.last_pushed_step.begin(), copy.last_pushed_step.end());
  if (newest >= 0) NoteStep(t, newest);
  absl::MutexLock lock(&t.mu);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (admission != nullptr && (*admission)[i] >= 0 && t.table.admits_by_count()) {
      t.table.PutWaiting(ids[i], static_cast<uint32_t>((*admission)[i]));  // not stored on the primary either
      continue;
    }
    const float* row = values.data() + i * static_cast<size_t>(want);
    t.table.Put(ids[i], row, row + t.table.dim());
  }
  if (version > t.version.load()) {
    t.version.store(version);
    t.pending.erase(t.pending.begin(), t.pending.lower_bound(version));
  }
  for (size_t r = 0; r < t.last_pushed.size() && r < copy.last_pushed_step.size(); ++r) {
    t.last_pushed[r] = std::max(t.last_pushed[r], copy.last_pushed_step[r]);
  }
  return absl::OkStatus();
}

void SparseStore::CopyAll(size_t piece_rows, const std::function<void(RowsReplica)>& emit) {
  for (size_t i = 0; i < num_tables(); ++i) {
    TableState& t = *tables_[i];
    absl::MutexLock lock(&t.mu);
    const std::vector<int64_t> last_pushed = IncludedPushes(t);
    const bool counts = t.table.admits_by_count();
    auto ids = std::make_shared<std::vector<int64_t>>();
    auto values = std::make_shared<std::vector<float>>();
    auto admission = std::make_shared<std::vector<int32_t>>();
    const auto flush = [&](bool last) {
      if (ids->empty() && !last) return;
      RowsReplica piece{options_.server_id, t.index, t.version.load(), t.table.row_floats(), std::move(ids),
                        std::move(values), last_pushed};
      if (counts) piece.admission = std::move(admission);
      emit(std::move(piece));
      ids = std::make_shared<std::vector<int64_t>>();
      values = std::make_shared<std::vector<float>>();
      admission = std::make_shared<std::vector<int32_t>>();
    };
    t.table.ForEach([&](int64_t id, const float* row, const float* slots) {
      ids->push_back(id);
      values->insert(values->end(), row, row + t.table.dim());
      values->insert(values->end(), slots, slots + t.table.slot_floats());
      if (counts) admission->push_back(-1);
      if (ids->size() >= piece_rows) flush(false);
    });
    // Ids counted toward admission: their counts (values unused).
    t.table.ForEachWaiting([&](int64_t id, uint32_t pushes) {
      ids->push_back(id);
      values->resize(values->size() + static_cast<size_t>(t.table.row_floats()), 0.0f);
      admission->push_back(static_cast<int32_t>(pushes));
      if (ids->size() >= piece_rows) flush(false);
    });
    flush(true);  // the table's version and steps, with or without rows left
  }
}

}  // namespace shardps
