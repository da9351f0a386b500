// SparseStore: requests that carry several tables' rows (a worker sends
// every table to a server in one request per step). Each part is the
// single-table push or pull it would otherwise be; the request is checked
// whole before any part is applied.
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/wire_dtype.h"
#include "server/sparse/sparse_store.h"
#include "server/sparse/table_state.h"

namespace shardps {

absl::StatusOr<std::vector<RowPayload>> SparseStore::SplitParts(const std::vector<Part>& parts,
                                                               const RowPayload& all) const {
  if (parts.size() == 1 && parts[0].n == all.ids.size() / sizeof(int64_t)) {
    return std::vector<RowPayload>{all};  // one table: its sizes are checked as such
  }
  if (all.dtype != wire::DTYPE_FLOAT32 && all.dtype != wire::DTYPE_BFLOAT16) {
    return absl::InvalidArgumentError(
        absl::StrCat("a push of ", parts.size(), " tables' rows of dtype ", all.dtype, "; want float32 or bfloat16"));
  }
  std::vector<RowPayload> out;
  size_t ids_at = 0, rows_at = 0;
  const size_t value_bytes = ValueBytes(all.dtype);
  std::vector<bool> seen(tables_.size());
  for (const Part& p : parts) {
    absl::StatusOr<TableState*> t = TableAt(p.table);
    if (!t.ok()) return t.status();
    if (seen[p.table]) {
      return absl::InvalidArgumentError(absl::StrCat("a push of ", parts.size(), " tables' rows names table ",
                                                     p.table, " twice"));
    }
    seen[p.table] = true;
    const size_t id_bytes = all.ids.size() - ids_at;
    const size_t row_bytes = (all.rows.size() - rows_at) / static_cast<size_t>((*t)->table.dim()) / value_bytes;
    if (p.n > id_bytes / sizeof(int64_t) || p.n > row_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("a push of ", parts.size(), " tables' rows: table ", p.table,
                                                     "'s part of ", p.n, " ids goes past the push's ids or rows"));
    }
    const size_t rows = p.n * static_cast<size_t>((*t)->table.dim()) * value_bytes;
    out.push_back(RowPayload{all.ids.substr(ids_at, p.n * sizeof(int64_t)), all.rows.substr(rows_at, rows), all.dtype});
    ids_at += p.n * sizeof(int64_t);
    rows_at += rows;
  }
  if (ids_at != all.ids.size() || rows_at != all.rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a push of ", parts.size(), " tables' rows: the parts hold ",
                                                   ids_at, " bytes of ids and ", rows_at, " of rows; the push has ",
                                                   all.ids.size(), " and ", all.rows.size()));
  }
  return out;
}

absl::StatusOr<std::vector<wire::PushOutcome>> SparseStore::PushParts(int rank, int64_t step,
                                                                      const std::vector<Part>& parts,
                                                                      const RowPayload& all) {
  absl::StatusOr<std::vector<RowPayload>> payloads = SplitParts(parts, all);
  if (!payloads.ok()) return payloads.status();
  std::vector<DecodedPush> pushes;
  pushes.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StatusOr<DecodedPush> push = DecodePush(parts[i].table, (*payloads)[i]);
    if (!push.ok()) return push.status();
    pushes.push_back(*std::move(push));
  }
  std::vector<wire::PushOutcome> outcomes;
  for (DecodedPush& push : pushes) {
    absl::StatusOr<wire::PushOutcome> outcome = ApplyPush(rank, step, std::move(push));
    if (!outcome.ok()) return outcome.status();
    outcomes.push_back(*outcome);
  }
  return outcomes;
}

absl::Status SparseStore::CheckAnswerFits(const std::vector<Part>& parts) const {
  if (options_.max_answer_bytes <= 0) return absl::OkStatus();
  // Values that fit in the smallest answer, bfloat16's; counted so that a
  // peer's huge n cannot overflow.
  const uint64_t budget = static_cast<uint64_t>(options_.max_answer_bytes) / 2;
  uint64_t rows = 0, values = 0;
  for (const Part& p : parts) {
    absl::StatusOr<TableState*> t = TableAt(p.table);
    if (!t.ok()) return t.status();
    const uint64_t dim = static_cast<uint64_t>((*t)->table.dim());
    rows += std::min<uint64_t>(p.n, budget);
    if (p.n > (budget - values) / dim) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a pull of ", parts.size() == 1 ? absl::StrCat(p.n) : absl::StrCat("at least ", rows), " rows of table ",
          (*t)->table.spec().name, " would answer more than the message limit of ", options_.max_answer_bytes,
          " bytes; pull fewer ids at once"));
    }
    values += p.n * dim;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SparseStore::WaitingPull>> SparseStore::DecodePulls(int64_t step,
                                                                              const std::vector<Part>& parts,
                                                                              absl::string_view ids,
                                                                              absl::Time deadline) const {
  if (absl::Status fits = CheckAnswerFits(parts); !fits.ok()) return fits;
  std::vector<WaitingPull> pulls;
  if (parts.size() == 1 && parts[0].n == ids.size() / sizeof(int64_t)) {  // one table: checked as such
    absl::StatusOr<TableState*> t = TableAt(parts[0].table);
    if (!t.ok()) return t.status();
    absl::StatusOr<std::vector<int64_t>> decoded = DecodeIds(**t, ids);
    if (!decoded.ok()) return decoded.status();
    pulls.push_back(WaitingPull{parts[0].table, step, *std::move(decoded), deadline, nullptr});
    return pulls;
  }
  size_t at = 0;
  for (const Part& p : parts) {
    if (p.n > (ids.size() - at) / sizeof(int64_t)) {
      return absl::InvalidArgumentError(absl::StrCat("a pull of ", parts.size(), " tables' rows: table ", p.table,
                                                     "'s part of ", p.n, " ids goes past the pull's ids"));
    }
    absl::StatusOr<TableState*> t = TableAt(p.table);
    if (!t.ok()) return t.status();
    absl::StatusOr<std::vector<int64_t>> decoded = DecodeIds(**t, ids.substr(at, p.n * sizeof(int64_t)));
    if (!decoded.ok()) return decoded.status();
    pulls.push_back(WaitingPull{p.table, step, *std::move(decoded), deadline, nullptr});
    at += p.n * sizeof(int64_t);
  }
  if (at != ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a pull of ", parts.size(), " tables' rows: the parts hold ", at,
                                                   " bytes of ids; the pull has ", ids.size()));
  }
  return pulls;
}

void SparseStore::PullParts(int rank, int64_t step, const std::vector<Part>& parts, absl::string_view ids,
                            absl::Time deadline, PartsDone done) {
  (void)rank;
  absl::StatusOr<std::vector<WaitingPull>> decoded = DecodePulls(step, parts, ids, deadline);
  if (!decoded.ok()) return done(decoded.status());
  AnswerAll(*std::move(decoded), std::move(done));
}

void SparseStore::AnswerAll(std::vector<WaitingPull> pulls, PartsDone done) {
  if (pulls.empty()) return done(std::vector<PulledRows>{});
  // Answered part by part, each on whichever thread makes it ready; the
  // last answer (or the first error) calls `done`.
  struct Gather {
    absl::Mutex mu;
    std::vector<PulledRows> rows;
    size_t left;
    absl::Status error;
    PartsDone done;
  };
  auto gather = std::make_shared<Gather>();
  gather->rows.resize(pulls.size());
  gather->left = pulls.size();
  gather->done = std::move(done);
  for (size_t i = 0; i < pulls.size(); ++i) {
    pulls[i].done = [gather, i](absl::StatusOr<PulledRows> got) {
      bool last = false;
      {
        absl::MutexLock lock(&gather->mu);
        if (got.ok()) {
          gather->rows[i] = *std::move(got);
        } else if (gather->error.ok()) {
          gather->error = got.status();
        }
        last = --gather->left == 0;
      }
      if (!last) return;
      if (!gather->error.ok()) return gather->done(gather->error);
      gather->done(std::move(gather->rows));
    };
    PullDecoded(std::move(pulls[i]));
  }
}

}  // namespace shardps
