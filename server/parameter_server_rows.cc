// ParameterServerImpl: pushes and pulls of sparse tables' rows, admitted as
// the dense ones are (session, initialised, not awaiting a rewind) and
// counted in the same totals. The tables themselves are server/sparse/.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"

namespace shardps {

absl::StatusOr<std::vector<wire::PushOutcome>> ParameterServerImpl::PushRows(
    uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts, const RowPayload& grads) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "push of rows");
  if (!rank.ok()) return rank.status();
  if (step < 0) return Refuse(absl::InvalidArgumentError(absl::StrCat("push step is ", step, "; want >= 0")));
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::vector<wire::PushOutcome>> outcomes = sparse_.PushParts(*rank, step, parts, grads);
  if (!outcomes.ok()) return Refuse(outcomes.status());
  const bool applied = std::any_of(outcomes->begin(), outcomes->end(),
                                   [](wire::PushOutcome o) { return o != wire::PUSH_DUPLICATE; });
  if (options_.job.mode != Mode::kSync && table_->size() == 0 && applied) {
    // A server of rows and no dense keys: a worker's push of rows for a
    // step finishes that step here (its clock, for ssp and checkpoints).
    membership_.AdvanceClock(*rank, step + 1);
    sparse_.WakeReady();
  }
  pushes_.fetch_add(1);
  bytes_pushed_.fetch_add(static_cast<int64_t>(grads.ids.size() + grads.rows.size()));
  apply_nanos_.fetch_add(absl::ToInt64Nanoseconds(clock_->Now() - start));
  return outcomes;
}

void ParameterServerImpl::PullRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                                   absl::string_view ids, absl::Time deadline, SparseStore::PartsDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "pull of rows");
  if (!rank.ok()) return done(rank.status());
  if (step < 0) return done(Refuse(absl::InvalidArgumentError(absl::StrCat("pull step is ", step, "; want >= 0"))));
  pulls_.fetch_add(1);
  sparse_.PullParts(*rank, step, parts, ids, deadline,
                    [this, done = std::move(done)](absl::StatusOr<std::vector<PulledRows>> rows) {
                      if (!rows.ok()) return done(Refuse(rows.status()));
                      for (const PulledRows& r : *rows) {
                        bytes_pulled_.fetch_add(static_cast<int64_t>(r.rows.size() * sizeof(float)));
                      }
                      done(std::move(rows));
                    });
}

}  // namespace shardps
