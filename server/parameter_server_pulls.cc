// ParameterServerImpl: pulls of dense keys (Pull), when each is ready by
// the job's mode, what it is answered, and the waiting pulls woken or
// failed. See parameter_server_impl.h.
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/parameter_server_impl.h"
#include "server/payload_validation.h"

namespace shardps {

bool ParameterServerImpl::PullReady(const PendingPull& pull) {
  switch (options_.job.mode) {
    case Mode::kAsync:
      return OwnPushApplied(pull);
    case Mode::kSsp:
      return membership_.MinLiveClock() >= pull.step - options_.job.staleness && OwnPushApplied(pull);
    case Mode::kSync:
      for (const ChunkKey& key : pull.keys) {
        const KeyState& k = table_->at(key);
        if (k.version < pull.step || !ReplicatedFor(k, pull.step)) return false;
      }
      return true;
  }
  return true;
}

bool ParameterServerImpl::OwnPushApplied(const PendingPull& pull) {
  if (!pull.after_own_push) return true;
  for (const ChunkKey& key : pull.keys) {
    KeyState& k = table_->at(key);
    absl::MutexLock lock(&k.mu);
    if (k.last_pushed_step[pull.rank] < pull.step - 1) return false;
  }
  return true;
}

void ParameterServerImpl::CompletePull(PendingPull pull) {
  if (pull.push_ack) return pull.done(std::vector<PulledChunk>{});
  std::vector<PulledChunk> out;
  out.reserve(pull.keys.size());
  for (const ChunkKey& key : pull.keys) {
    KeyState& k = table_->at(key);
    PulledChunk chunk{key, 0, nullptr};
    {
      absl::MutexLock lock(&k.mu);
      chunk.version = k.version;
      chunk.weights = k.weights;
      // Replication: only what the next copy has (DESIGN.md, "Replication").
      if (!ReplicatedFor(k, k.version)) {
        chunk.version = k.replicated_version;
        if (k.replicated_weights != nullptr) chunk.weights = k.replicated_weights;
      }
      if (pull.value_bytes > 0) k.last_pulled_version[pull.rank] = chunk.version;  // an await reads nothing
    }
    bytes_pulled_.fetch_add(static_cast<int64_t>(chunk.weights->size()) * pull.value_bytes);
    out.push_back(std::move(chunk));
  }
  pulls_.fetch_add(1);
  pull.done(std::move(out));
}

void ParameterServerImpl::FailPullsAwaitingPush(int rank, int64_t step, absl::string_view why) {
  if (options_.job.mode == Mode::kSync) return;  // sync pulls wait for versions, not for one push
  // Only pulls still missing their push: an ssp pull whose push is applied
  // waits for the staleness bound alone, whatever this push was.
  for (PendingPull& p : waiters_.TakeReady([&](const PendingPull& p) {
         return p.rank == rank && p.step - 1 <= step && !OwnPushApplied(p);
       })) {
    refused_.fetch_add(1);
    p.done(absl::FailedPreconditionError(absl::StrCat("pull for step ", p.step, " by worker ", rank, " on server ",
                                                      options_.server_id, " waited for its own push, but ", why)));
  }
}

void ParameterServerImpl::WakeReadyPulls() {
  for (PendingPull& p : waiters_.TakeReady([this](const PendingPull& p) { return WaiterReady(p); })) {
    CompletePull(std::move(p));
  }
  if (options_.job.mode == Mode::kSsp) sparse_.WakeReady();  // a worker's clock may have moved
}

void ParameterServerImpl::Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer,
                               bool after_own_push, absl::Time deadline, PullDone done) {
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::StatusOr<int> rank = AdmitTraffic(session, "pull");
  if (!rank.ok()) return done(rank.status());
  if (absl::Status in_range = CheckWireStep("pull step", step); !in_range.ok()) return done(Refuse(in_range));
  if (keys.empty()) return done(Refuse(absl::InvalidArgumentError("pull names no keys")));
  absl::flat_hash_set<ChunkKey> seen;  // a key named twice would be copied twice into the answer
  for (const ChunkKey& key : keys) {
    absl::StatusOr<KeyState*> k = table_->Find(key);
    if (!k.ok()) return done(Refuse(k.status()));
    if (!seen.insert(key).second) {
      return done(Refuse(absl::InvalidArgumentError(absl::StrCat("pull names key ", KeyName(key), " twice"))));
    }
    if (absl::Status serving = CheckServing(**k); !serving.ok()) return done(Refuse(serving));
  }
  const int value_bytes = answer == wire::DTYPE_UNSPECIFIED ? 0 : ValueBytes(answer);
  PendingPull pull{*rank, step, std::move(keys), value_bytes, after_own_push, WaitDeadline(deadline), std::move(done)};
  std::optional<PendingPull> ready =
      waiters_.AddUnlessReady(std::move(pull), [this](const PendingPull& p) { return PullReady(p); });
  if (ready) CompletePull(*std::move(ready));
}

}  // namespace shardps
