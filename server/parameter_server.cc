// ParameterServerImpl: the requests workers send (Register, Init, Push,
// Heartbeat; Pull in parameter_server_pulls.cc). See parameter_server_impl.h.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "server/flush_denormals.h"
#include "server/parameter_server_impl.h"
#include "server/payload_validation.h"
#include "spdlog/spdlog.h"

namespace shardps {

absl::Status ParameterServerImpl::Refuse(absl::Status status) {
  refused_.fetch_add(1);
  if (absl::IsUnauthenticated(status)) unauthenticated_.fetch_add(1);
  spdlog::warn("refused: {}: {}", absl::StatusCodeToString(status.code()), std::string(status.message()));
  return status;
}

absl::StatusOr<int> ParameterServerImpl::AdmitTraffic(uint64_t session, const char* what) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  absl::StatusOr<int> rank = membership_.Touch(session);
  if (!rank.ok()) return Refuse(rank.status());
  if (!initialized_) {
    return Refuse(absl::FailedPreconditionError(
        absl::StrCat("server ", options_.server_id, " is not initialised: call Init first")));
  }
  if (awaiting_rewind_) {
    return Refuse(absl::AbortedError(absl::StrCat(
        what, " refused: server ", options_.server_id, " restored step ", checkpointer_.last_step(),
        " from its checkpoint and waits for the job to rewind to a step every server holds; register again")));
  }
  return rank;
}

void ParameterServerImpl::InstallKeys(KeyMap map, bool publish) {
  tensor_staleness_ = std::make_unique<StalenessHistogram[]>(map.layout().tensors.size());
  table_ = std::make_unique<KeyTable>(std::move(map), options_.server_id, optimizer_->NumSlots(),
                                      options_.job.num_workers, HeldPrimaries());
  job_layout_hash_ = LayoutHash(table_->map().layout());
  for (SparseStore* rows : RowStores()) rows->Install(table_->map().layout().tables);
  if (publish) initialized_ = true;
}

int64_t ParameterServerImpl::CurrentStep(int rank) {
  switch (options_.job.mode) {
    case Mode::kSync: return initialized_ ? table_->VersionRange().second : 0;
    case Mode::kSsp: return membership_.MaxClock();
    case Mode::kAsync: return membership_.ClockOf(rank);
  }
  return 0;
}

absl::StatusOr<Registration> ParameterServerImpl::Register(int rank, const JobView& view,
                                                           std::optional<Resume> resume) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  if (rank < 0 || rank >= options_.job.num_workers) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", rank, " is out of range; this job has ", options_.job.num_workers, " workers")));
  }
  if (view.layout_hash == 0) return Refuse(absl::InvalidArgumentError("registration carries no layout hash"));
  if (resume) {
    if (absl::Status in_range = CheckWireStep("resume step", resume->step); !in_range.ok()) return Refuse(in_range);
  }
  // The first registrant's layout hash becomes the job's, but only once the
  // rest of its view agrees: a refused registrant must not fix it.
  JobView ours = options_.job;
  uint64_t job_hash = job_layout_hash_.load();
  ours.layout_hash = job_hash != 0 ? job_hash : view.layout_hash;
  absl::Status agree = CheckJobViewsAgree(ours, view);
  if (agree.ok() && job_hash == 0 && !job_layout_hash_.compare_exchange_strong(job_hash, view.layout_hash)) {
    ours.layout_hash = job_hash;  // another registrant got there first
    agree = CheckJobViewsAgree(ours, view);
  }
  if (!agree.ok()) {
    return Refuse(absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " refused by server ", options_.server_id, ": ", agree.message())));
  }
  absl::ReaderMutexLock state(&rewind_mu_);
  if (resume && resume->timeline != timeline_) {
    return Refuse(absl::AbortedError(absl::StrCat("worker ", rank, " would resume at step ", resume->step,
                                                  " of timeline ", resume->timeline, ", but server ",
                                                  options_.server_id, " is on timeline ", timeline_.load(),
                                                  " (a rewind came in between); register afresh")));
  }
  Registration reg;
  reg.current_step = resume ? resume->step : CurrentStep(rank);
  reg.heartbeat_interval = options_.heartbeat_interval;
  reg.session_id = membership_.Register(rank, reg.current_step);
  reg.incarnation = incarnation_;
  reg.timeline = timeline_;
  reg.awaiting_rewind = awaiting_rewind_;
  reg.initialized = initialized_;
  reg.trained = initialized_ && table_->VersionRange().second > 0;
  reg.checkpoint_steps = checkpointer_.Steps();
  // The steps it had begun keep their counts: the keys it pushes again come
  // back as duplicates (last_pushed_step) and are not counted a second time,
  // so forgetting them would leave those steps unfinished for good.
  // A later start step can leave a sync step waiting for nobody.
  CompleteReadySyncSteps();
  spdlog::info("worker {} registered (session {:016x}), continues at step {}{}", rank, reg.session_id,
               reg.current_step, reg.awaiting_rewind ? "; this server awaits a rewind" : "");
  return reg;
}

absl::StatusOr<wire::InitOutcome> ParameterServerImpl::Init(uint64_t session, const Layout& layout,
                                                            const std::vector<ChunkPayload>& chunks) {
  absl::StatusOr<int> rank = membership_.Touch(session);
  if (!rank.ok()) return Refuse(rank.status());
  absl::ReaderMutexLock state(&rewind_mu_);
  absl::MutexLock lock(&init_mu_);
  if (initialized_) {
    if (layout != table_->map().layout()) {
      return Refuse(absl::FailedPreconditionError(absl::StrCat(
          "Init with layout {", LayoutDebugString(layout), "} refused: server ", options_.server_id,
          " was initialised with {", LayoutDebugString(table_->map().layout()), "}")));
    }
    return wire::INIT_ALREADY_DONE;
  }
  const uint64_t hash = LayoutHash(layout);
  if (job_layout_hash_ != 0 && job_layout_hash_ != hash) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat("Init layout hash ", absl::Hex(hash),
                                                             " differs from the registered job's ",
                                                             absl::Hex(job_layout_hash_.load()))));
  }
  absl::StatusOr<KeyMap> map = KeyMap::Build(layout, options_.job.num_servers, options_.job.partition_bytes);
  if (!map.ok()) return Refuse(map.status());
  const std::vector<int> held = HeldPrimaries();
  absl::flat_hash_map<ChunkKey, const ChunkPayload*> given;
  for (const ChunkPayload& c : chunks) {
    if (absl::Status owned = CheckHeld(*map, c.key, options_.server_id, held); !owned.ok()) return Refuse(owned);
    absl::Status valid = ValidatePayload("initial value", c, map->Find(c.key)->length, /*bfloat16_allowed=*/false);
    if (!valid.ok()) return Refuse(valid);
    if (!given.emplace(c.key, &c).second) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("Init names key ", KeyName(c.key), " twice")));
    }
  }
  for (const ChunkInfo& c : map->chunks()) {
    if (std::find(held.begin(), held.end(), c.server) == held.end()) continue;
    if (!given.contains(c.key)) {
      return Refuse(absl::InvalidArgumentError(
          absl::StrCat("Init lacks key ", KeyName(c.key), " of server ", options_.server_id)));
    }
  }
  InstallKeys(*std::move(map), /*publish=*/false);
  for (size_t i = 0; i < table_->size(); ++i) {
    KeyState& k = table_->key(i);
    absl::MutexLock key_lock(&k.mu);
    k.UpdateWeights([&](const float*, float* to) { CopyPayload(given[k.info.key]->pieces, reinterpret_cast<char*>(to)); });
    PinAcknowledged(k);  // version 0, which every copy is given
  }
  // Only now: a pull (which does not take init_mu_) that finds the server
  // initialised reads the initial values, not the zeros before them.
  initialized_ = true;
  checkpointer_.Attach(table_.get(), /*step=*/0, timeline_, /*write_now=*/true);
  spdlog::info("initialised by worker {}: {} keys, {} bytes of layout {{{}}}", *rank, table_->size(),
               table_->owned_bytes(), LayoutDebugString(layout));
  return wire::INIT_APPLIED;
}

absl::Status ParameterServerImpl::ValidatePush(int rank, int64_t step, const std::vector<ChunkPayload>& chunks,
                                               std::vector<KeyState*>& states) {
  if (absl::Status in_range = CheckWireStep("push step", step); !in_range.ok()) return in_range;
  if (chunks.empty()) return absl::InvalidArgumentError("push carries no chunks");
  absl::flat_hash_set<ChunkKey> seen;
  for (const ChunkPayload& c : chunks) {
    absl::StatusOr<KeyState*> k = table_->Find(c.key);
    if (!k.ok()) return k.status();
    if (!seen.insert(c.key).second) {
      return absl::InvalidArgumentError(absl::StrCat("push names key ", KeyName(c.key), " twice"));
    }
    if (absl::Status serving = CheckServing(**k); !serving.ok()) return serving;
    absl::Status valid = ValidatePayload("gradient", c, (*k)->info.length, /*bfloat16_allowed=*/true);
    if (!valid.ok()) return valid;
    if (c.base_version && !InWireStepRange(*c.base_version)) {  // the key's name only for the error
      return CheckWireStep(absl::StrCat("the base version of key ", KeyName(c.key)).c_str(), *c.base_version);
    }
    if (options_.job.mode == Mode::kSync) {
      absl::MutexLock lock(&(*k)->mu);
      if (absl::Status at_step = SyncAggregator::CheckStep(**k, rank, step); !at_step.ok()) return at_step;
    }
    states.push_back(*k);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<wire::PushOutcome>> ParameterServerImpl::Push(
    uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) {
  absl::ReaderMutexLock state(&rewind_mu_);
  return ApplyPush(session, step, chunks);
}

absl::StatusOr<std::vector<wire::PushOutcome>> ParameterServerImpl::ApplyPush(
    uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks, int* rank_out) {
  const FlushDenormals flush;  // gradient sums and the optimizer
  absl::StatusOr<int> rank = AdmitTraffic(session, "push");
  if (!rank.ok()) return rank.status();
  if (rank_out != nullptr) *rank_out = *rank;
  // Validate everything before touching any key.
  std::vector<KeyState*> states;
  if (absl::Status valid = ValidatePush(*rank, step, chunks, states); !valid.ok()) {
    return RefusePush(*rank, step, valid);
  }

  const size_t served = ServedKeys();  // the keys a worker pushes here to finish a step
  std::vector<wire::PushOutcome> outcomes;
  bool applied_any = false;
  for (size_t i = 0; i < chunks.size(); ++i) {
    KeyState& k = *states[i];
    absl::StatusOr<wire::PushOutcome> outcome;
    {
      absl::MutexLock lock(&k.mu);
      outcome = options_.job.mode == Mode::kSync ? sync_.Add(k, *rank, step, chunks[i])
                                                 : PushAsync(k, *rank, step, chunks[i]);
    }
    if (!outcome.ok()) {
      // Only a step completed without this worker since ValidatePush (it
      // was declared dead meanwhile) gets here: the keys before this one
      // took the push, and the steps they completed still wake their pulls.
      if (applied_any) AfterApplied();
      return RefusePush(*rank, step, outcome.status());
    }
    outcomes.push_back(*outcome);
    if (*outcome != wire::PUSH_DUPLICATE) {
      clocks_.NotePushed(*rank, step, served);
      bytes_pushed_.fetch_add(PayloadBytes(chunks[i].pieces));
      applied_any = true;
    }
  }
  pushes_.fetch_add(1);
  if (applied_any) AfterApplied();
  return outcomes;
}

void ParameterServerImpl::AfterApplied() {
  FlushReplicas();
  WakeReadyPulls();
}

absl::StatusOr<wire::PushOutcome> ParameterServerImpl::PushAsync(KeyState& k, int rank, int64_t step,
                                                                 const ChunkPayload& grad) {
  // This step or a later one pushed already (sent again after a failover, say).
  if (step <= k.last_pushed_step[rank]) return wire::PUSH_DUPLICATE;
  k.last_pushed_step[rank] = step;
  const int64_t staleness = CountStaleness(k, rank, grad);
  Apply(k, grad, StalenessLrScale(staleness), staleness);
  return wire::PUSH_APPLIED;
}

int64_t ParameterServerImpl::CountStaleness(const KeyState& k, int rank, const ChunkPayload& grad) {
  const int64_t base = grad.base_version ? *grad.base_version : k.last_pulled_version[rank];
  // A base ahead of the key (a server restored an older checkpoint) counts 0.
  const int64_t staleness = base < 0 ? 0 : std::max<int64_t>(0, k.version - base);
  staleness_.Add(staleness);
  tensor_staleness_[k.info.key.tensor].Add(staleness);
  return staleness;
}

double ParameterServerImpl::StalenessLrScale(int64_t staleness) const {
  if (options_.staleness_lr == StalenessLr::kNone) return 1.0;
  // lr / (1 + staleness) in place of lr / N: with N workers pushing in turn a
  // push's staleness is about N - 1, so the two agree on average.
  const double stale = 1.0 + static_cast<double>(staleness);
  if (options_.staleness_lr == StalenessLr::kInverse) return static_cast<double>(PushesPerStep(options_)) / stale;
  // capped: damped only beyond a round of the other workers, whatever a push's lr is.
  return std::min(1.0, static_cast<double>(options_.job.num_workers) / stale);
}

void ParameterServerImpl::Apply(KeyState& k, const float* grad) {
  Apply(k,
        ChunkPayload{k.info.key, wire::DTYPE_FLOAT32,
                     {absl::string_view(reinterpret_cast<const char*>(grad), k.info.length * 4)}},
        1.0);
}

void ParameterServerImpl::Apply(KeyState& k, const ChunkPayload& grad, double lr_scale, int64_t staleness) {
  const FlushDenormals flush;
  const absl::Time start = absl::Now();
  absl::InlinedVector<float*, 2> slots(k.slots.size());
  k.UpdateWeights([&](const float* from, float* to) {
    ForEachGradientBlock(grad.pieces, grad.dtype, [&](int64_t first, const UnalignedFloat* values, int64_t n) {
      for (size_t s = 0; s < slots.size(); ++s) slots[s] = k.slots[s].data() + first;
      optimizer_->Apply(UpdateStep{k.version, lr_scale}, n, values, from + first, to + first, slots.data());
    });
  });
  k.version.fetch_add(1);
  if (options_.job.mode == Mode::kSync) checkpointer_.OnApplied(k.index, k);
  QueueReplica(k);
  const absl::Time end = absl::Now();
  apply_nanos_.fetch_add(absl::ToInt64Nanoseconds(end - start));
  if (options_.trace) {
    TraceArgs args = {{"version", k.version.load()}, {"bytes", k.info.length * 4}};
    if (staleness >= 0) args.push_back({"staleness", staleness});
    options_.trace->Async("apply", absl::StrCat("apply ", table_->map().layout().tensors[k.info.key.tensor].name, "/",
                                               k.info.key.chunk),
                         start, end, std::move(args));
  }
}

void ParameterServerImpl::CompleteReadySyncSteps() {
  if (options_.job.mode != Mode::kSync || !initialized_) return;
  bool completed = false;
  for (size_t i = 0; i < table_->size(); ++i) {
    KeyState& k = table_->key(i);
    absl::MutexLock lock(&k.mu);
    completed |= sync_.CompleteIfReady(k);
  }
  if (completed) {
    FlushReplicas();
    WakeReadyPulls();
  }
}

absl::Status ParameterServerImpl::RefusePush(int rank, int64_t step, const absl::Status& status) {
  FailPullsAwaitingPush(rank, step, absl::StrCat("its push of step ", step, " was refused: ", status.message()));
  return Refuse(status);
}

absl::StatusOr<int64_t> ParameterServerImpl::Heartbeat(uint64_t session) {
  absl::StatusOr<int> rank = membership_.Touch(session);
  if (!rank.ok()) return Refuse(rank.status());
  heartbeats_.fetch_add(1);
  return CurrentStep(*rank);
}

}  // namespace shardps
