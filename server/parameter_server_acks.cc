// ParameterServerImpl: when a push is acknowledged (DESIGN.md,
// "Replication"). At once, except in sync with --replicas > 1: there the
// answer to a push of step t waits until the next copy of every key (or
// table) it names holds version t, every step before t. A worker keeps only
// its last step's pushes to send again at a failover (client/failover.h), so
// a failover never needs a step the worker has dropped, whether the worker
// pulls those keys or not. Where workers pull every step, as trainers do,
// the pull of step t waited for the same copy already and nothing waits.
#include <atomic>
#include <memory>
#include <utility>

#include "server/parameter_server_impl.h"

namespace shardps {

void ParameterServerImpl::Push(uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks,
                               absl::Time deadline, PushDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);  // held until the hold is queued: a rewind answers it
  absl::StatusOr<std::vector<wire::PushOutcome>> outcomes = ApplyPush(session, step, chunks);
  if (!outcomes.ok() || !HoldsPushAcks()) return done(std::move(outcomes));
  std::vector<ChunkKey> keys;
  keys.reserve(chunks.size());
  for (const ChunkPayload& c : chunks) keys.push_back(c.key);
  PendingPull ack{/*rank=*/-1, step, std::move(keys), /*value_bytes=*/0, /*after_own_push=*/false, deadline,
                  [done = std::move(done), outcomes = *std::move(outcomes)](
                      absl::StatusOr<std::vector<PulledChunk>> held) mutable {
                    if (!held.ok()) return done(held.status());
                    done(std::move(outcomes));
                  }};
  ack.push_ack = true;
  std::optional<PendingPull> ready =
      waiters_.AddUnlessReady(std::move(ack), [this](const PendingPull& p) { return PullReady(p); });
  if (!ready) return (void)push_acks_held_.fetch_add(1);
  CompletePull(*std::move(ready));
}

void ParameterServerImpl::PushRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                                   const RowPayload& grads, absl::Time deadline, PushDone done) {
  std::vector<wire::PushOutcome> outcomes;
  bool held = false;
  {
    absl::ReaderMutexLock state(&rewind_mu_);
    absl::StatusOr<SparseStore*> store = ApplyPushRows(session, step, parts, grads, &outcomes);
    if (!store.ok()) return done(store.status());
    if (HoldsPushAcks()) {
      held = true;
      auto answered = std::make_shared<std::atomic<bool>>(false);
      (*store)->AwaitCopied(step, parts, deadline,
                            [done, outcomes, answered](const absl::Status& copied) {
                              answered->store(true);
                              if (!copied.ok()) return done(copied);
                              done(outcomes);
                            });
      if (!answered->load()) push_acks_held_.fetch_add(1);  // (one another thread answered meanwhile is not counted)
    }
  }
  FlushReplicas();  // the rows of a step this push completed (the hold may wait for them)
  if (!held) done(std::move(outcomes));
}

}  // namespace shardps
