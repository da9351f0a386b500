// ParameterServerImpl: pushes and pulls of sparse tables' rows, admitted as
// the dense ones are (session, initialised, not awaiting a rewind) and
// counted in the same totals. The tables themselves are server/sparse/.
#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"

namespace shardps {

absl::StatusOr<wire::PushOutcome> ParameterServerImpl::PushRows(uint64_t session, int64_t step, uint32_t table,
                                                                const RowPayload& grads) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "push of rows");
  if (!rank.ok()) return rank.status();
  if (step < 0) return Refuse(absl::InvalidArgumentError(absl::StrCat("push step is ", step, "; want >= 0")));
  const absl::Time start = clock_->Now();
  absl::StatusOr<wire::PushOutcome> outcome = sparse_.Push(*rank, step, table, grads);
  if (!outcome.ok()) return Refuse(outcome.status());
  if (options_.job.mode != Mode::kSync && table_->size() == 0 && *outcome != wire::PUSH_DUPLICATE) {
    // A server of rows and no dense keys: a worker's push of rows for a
    // step finishes that step here (its clock, for ssp and checkpoints).
    membership_.AdvanceClock(*rank, step + 1);
    sparse_.WakeReady();
  }
  pushes_.fetch_add(1);
  bytes_pushed_.fetch_add(static_cast<int64_t>(grads.ids.size() + grads.rows.size()));
  apply_nanos_.fetch_add(absl::ToInt64Nanoseconds(clock_->Now() - start));
  return outcome;
}

void ParameterServerImpl::PullRows(uint64_t session, int64_t step, uint32_t table, absl::string_view ids,
                                   absl::Time deadline, SparseStore::RowsDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "pull of rows");
  if (!rank.ok()) return done(rank.status());
  if (step < 0) return done(Refuse(absl::InvalidArgumentError(absl::StrCat("pull step is ", step, "; want >= 0"))));
  pulls_.fetch_add(1);
  sparse_.Pull(*rank, step, table, ids, deadline,
               [this, done = std::move(done)](absl::StatusOr<PulledRows> rows) {
                 if (!rows.ok()) return done(Refuse(rows.status()));
                 bytes_pulled_.fetch_add(static_cast<int64_t>(rows->rows.size() * sizeof(float)));
                 done(std::move(rows));
               });
}

}  // namespace shardps
