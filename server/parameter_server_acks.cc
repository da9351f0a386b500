// ParameterServerImpl: when a push is answered (DESIGN.md, "Replication").
// At once without --replicas > 1. With it, the answer to a worker's push of
// step t waits until the next copy of every key (or table) it names
// includes that worker's pushes up to step t - KeptPushSteps
// (common/replica_map.h): sync, every step before t; async and ssp, the
// pushes of 4 steps before (rows: 6). A worker keeps its acknowledged pushes
// of that many steps to send again at a failover (client/failover.h), so a
// failover never needs one it has dropped, however far a slow link lets the
// copy fall behind and whether or not the worker pulls. Where the copy keeps
// up, as it does for a trainer that pulls every step (the pull of step t
// waited for the same copy in sync), nothing waits.
#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "server/parameter_server_impl.h"

namespace shardps {

bool ParameterServerImpl::PushAckReady(const PendingPull& ack) {
  // Sync: every step before `step` there, as a pull of `step` waits for.
  if (options_.job.mode == Mode::kSync) return PullReady(ack);
  const int64_t included = ack.step - KeptPushSteps(/*sync=*/false);  // the copy must include this step's pushes
  for (const ChunkKey& key : ack.keys) {
    KeyState& k = table_->at(key);
    if (GateCopy(k) < 0) continue;
    absl::MutexLock lock(&k.mu);
    if (k.replicated_pushed_step[ack.rank] < included) return false;
  }
  return true;
}

void ParameterServerImpl::Push(uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks,
                               absl::Time deadline, PushDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);  // held until the hold is queued: a rewind answers it
  int rank = -1;
  absl::StatusOr<std::vector<wire::PushOutcome>> outcomes = ApplyPush(session, step, chunks, &rank);
  if (!outcomes.ok() || !Replicating()) return done(std::move(outcomes));
  std::vector<ChunkKey> keys;
  keys.reserve(chunks.size());
  for (const ChunkPayload& c : chunks) keys.push_back(c.key);
  PendingPull ack{rank, step, std::move(keys), /*value_bytes=*/0, /*after_own_push=*/false, WaitDeadline(deadline),
                  [done = std::move(done), outcomes = *std::move(outcomes)](
                      absl::StatusOr<std::vector<PulledChunk>> held) mutable {
                    if (!held.ok()) return done(held.status());
                    done(std::move(outcomes));
                  }};
  ack.push_ack = true;
  std::optional<PendingPull> ready =
      waiters_.AddUnlessReady(std::move(ack), [this](const PendingPull& p) { return WaiterReady(p); });
  if (!ready) return (void)push_acks_held_.fetch_add(1);
  CompletePull(*std::move(ready));
}

void ParameterServerImpl::PushRows(uint64_t session, int64_t step, const std::vector<SparseStore::Part>& parts,
                                   const RowPayload& grads, absl::Time deadline, PushDone done) {
  std::vector<wire::PushOutcome> outcomes;
  bool held = false;
  {
    absl::ReaderMutexLock state(&rewind_mu_);
    int rank = -1;
    absl::StatusOr<SparseStore*> store = ApplyPushRows(session, step, parts, grads, &outcomes, &rank);
    if (!store.ok()) return done(store.status());
    if (Replicating()) {
      held = true;
      auto answered = std::make_shared<std::atomic<bool>>(false);
      const absl::Time wait_until = WaitDeadline(deadline);
      (*store)->AwaitCopied(rank, step, parts, wait_until, [done, outcomes, answered](const absl::Status& copied) {
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
