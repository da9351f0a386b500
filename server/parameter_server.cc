#include "server/parameter_server.h"

#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/wire_dtype.h"
#include "server/key_state.h"
#include "server/membership.h"
#include "server/optimizer.h"
#include "server/pull_waiters.h"
#include "server/shard_checkpoint.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

absl::Status ValidateOptions(const ServerOptions& o) {
  const JobView& j = o.job;
  if (j.num_servers < 1) return absl::InvalidArgumentError(absl::StrCat("num_servers is ", j.num_servers, "; want >= 1"));
  if (j.num_workers < 1) return absl::InvalidArgumentError(absl::StrCat("num_workers is ", j.num_workers, "; want >= 1"));
  if (o.server_id < 0 || o.server_id >= j.num_servers) {
    return absl::InvalidArgumentError(
        absl::StrCat("server_id is ", o.server_id, "; want 0..", j.num_servers - 1));
  }
  if (j.staleness < 0) return absl::InvalidArgumentError(absl::StrCat("staleness is ", j.staleness, "; want >= 0"));
  if (j.partition_bytes < 4 || j.partition_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition_bytes is ", j.partition_bytes, "; want a positive multiple of 4"));
  }
  if (o.worker_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("worker_timeout must be positive");
  }
  if (o.checkpoint_every_steps < 0) {
    return absl::InvalidArgumentError("checkpoint_every_steps must be >= 0");
  }
  return ValidateOptimizerOptions(o.optimizer);
}

// Treats denormal floats as zero while in scope, on this thread. Optimizer
// state decays towards zero (momentum buffers, a learning rate annealed to
// 0) and arithmetic on denormals is many times slower on x86; their values
// are far below float32's precision of any weight.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  const unsigned saved_;
};

// Index of the first non-finite value among n values stored at `bytes`
// (any alignment) as `Bits` (uint32_t for float32, uint16_t for bfloat16),
// or -1. A value is NaN or Inf exactly when its exponent bits
// (`kExponent`) are all ones. Blocks are checked without branches, so the
// common all-finite case runs at memory speed.
template <typename Bits, Bits kExponent>
int64_t FirstNonFinite(const char* bytes, int64_t n) {
  constexpr int64_t kBlock = 4096;
  auto non_finite = [bytes](int64_t i) {
    Bits bits;
    std::memcpy(&bits, bytes + sizeof(Bits) * i, sizeof(Bits));
    return static_cast<uint32_t>((bits & kExponent) == kExponent);
  };
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t any = 0;
    for (int64_t i = start; i < end; ++i) any |= non_finite(i);
    if (any == 0) continue;
    for (int64_t i = start; i < end; ++i) {
      if (non_finite(i)) return i;
    }
  }
  return -1;
}

// OK when `server` owns `key` in `map`; NOT_FOUND naming the key otherwise.
absl::Status CheckOwned(const KeyMap& map, const ChunkKey& key, int server) {
  const ChunkInfo* info = map.Find(key);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat("key ", KeyName(key), " is not in the layout"));
  if (info->server == server) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("key ", KeyName(key), " is owned by server ", info->server, ", not server ", server));
}

// INVALID_ARGUMENT unless `chunk` holds `length` finite values in an
// encoding the server takes: float32 always, bfloat16 when
// `bfloat16_allowed` (gradients; initial values are float32 only).
// `what` names the payload in the message ("gradient", "initial value").
absl::Status ValidatePayload(const char* what, const ChunkPayload& chunk, int64_t length, bool bfloat16_allowed) {
  const int value_bytes = ValueBytes(chunk.dtype);
  if (value_bytes == 0 || (chunk.dtype == wire::DTYPE_BFLOAT16 && !bfloat16_allowed)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " for key ", KeyName(chunk.key), " has dtype ",
                                                   wire::DType_Name(chunk.dtype), "; want DTYPE_FLOAT32",
                                                   bfloat16_allowed ? " or DTYPE_BFLOAT16" : ""));
  }
  const int64_t bytes = PayloadBytes(chunk.pieces);
  if (bytes != length * value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " for key ", KeyName(chunk.key), " has ", bytes,
                                                   " bytes; want ", length * value_bytes, " (", length, " ",
                                                   WireDTypeName(chunk.dtype), " values)"));
  }
  int64_t bad = -1;
  auto check = [&](int64_t first, const char* values, int64_t n) {
    if (bad >= 0) return;
    const int64_t at = value_bytes == 4 ? FirstNonFinite<uint32_t, 0x7f800000u>(values, n)
                                        : FirstNonFinite<uint16_t, 0x7f80u>(values, n);
    if (at >= 0) bad = first + at;
  };
  if (value_bytes == 4) {
    ForEachValueRun<4>(chunk.pieces, check);
  } else {
    ForEachValueRun<2>(chunk.pieces, check);
  }
  if (bad >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " for key ", KeyName(chunk.key), " has a NaN or Inf at index ", bad));
  }
  return absl::OkStatus();
}

class ParameterServerImpl final : public ParameterServer {
 public:
  ParameterServerImpl(const ServerOptions& options, Clock* clock)
      : options_(options),
        clock_(clock),
        optimizer_(MakeOptimizer(options.optimizer)),
        membership_(options.job.num_workers, options.worker_timeout, clock),
        pushed_keys_per_step_(options.job.num_workers),
        last_checkpoint_time_(clock->Now()) {}

  ~ParameterServerImpl() override { Shutdown(); }

  absl::Status Restore();

  absl::StatusOr<Registration> Register(int rank, const JobView& view) override;
  absl::StatusOr<wire::InitOutcome> Init(uint64_t session, const Layout& layout,
                                         const std::vector<ChunkPayload>& chunks) override;
  absl::StatusOr<std::vector<wire::PushOutcome>> Push(
      uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) override;
  void Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer, absl::Time deadline,
            PullDone done) override;
  absl::StatusOr<int64_t> Heartbeat(uint64_t session) override;
  void Tick() override;
  absl::StatusOr<std::string> CheckpointNow() override;
  ServerStats Stats() override;
  int server_id() const override { return options_.server_id; }
  Mode mode() const override { return options_.job.mode; }
  absl::Status RecordRefused(absl::Status status) override { return Refuse(std::move(status)); }
  void Shutdown() override;

 private:
  // Counts and logs a refused request.
  absl::Status Refuse(absl::Status status);
  absl::StatusOr<int> TouchSession(uint64_t session);
  // Installs the keys of `map` on this server. REQUIRES: init_mu_ held, not initialized.
  void InstallKeys(KeyMap map) ABSL_EXCLUSIVE_LOCKS_REQUIRED(init_mu_);
  // NOT_FOUND naming the key when this server does not own it.
  absl::StatusOr<KeyState*> FindOwned(const ChunkKey& key);
  // {smallest, largest} key version; {0, 0} before Init.
  std::pair<int64_t, int64_t> VersionRange();

  wire::PushOutcome PushSync(KeyState& k, int rank, int64_t step, const ChunkPayload& grad,
                             absl::Status& error);
  wire::PushOutcome PushAsync(KeyState& k, int rank, int64_t step, const ChunkPayload& grad,
                              absl::Status& error);
  // Applies the averaged sync gradient when every required worker pushed.
  bool CompleteSyncStepIfReady(KeyState& k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  // Runs the optimizer over the key with `grad` and counts a version.
  void ApplyTimed(KeyState& k, const float* grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  void ApplyTimed(KeyState& k, const ChunkPayload& grad) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k.mu);
  void NoteClock(int rank, int64_t step);

  bool PullReady(const PendingPull& pull);
  void CompletePull(PendingPull pull);
  void WakeReadyPulls();

  int64_t CurrentStep();
  absl::StatusOr<ShardSnapshot> Snapshot(bool require_equal_versions);
  absl::StatusOr<std::string> WriteCheckpoint(bool require_equal_versions);
  void MaybeCheckpoint();

  // Constant after construction.
  const ServerOptions options_;
  Clock* const clock_;
  const std::unique_ptr<Optimizer> optimizer_;

  Membership membership_;
  PullWaiters waiters_;

  // The layout and keys are set once, by the first Init or by Restore(),
  // under init_mu_; after initialized_ is true they are only read.
  absl::Mutex init_mu_;
  std::atomic<bool> initialized_{false};
  std::unique_ptr<KeyMap> key_map_;
  std::vector<std::unique_ptr<KeyState>> keys_;
  absl::flat_hash_map<ChunkKey, KeyState*> by_key_;
  // The layout hash of the job: from the first registration, then the layout.
  std::atomic<uint64_t> job_layout_hash_{0};

  // Per worker rank, per step: keys pushed so far (for ssp clocks).
  absl::Mutex clock_mu_;
  std::vector<std::map<int64_t, int>> pushed_keys_per_step_ ABSL_GUARDED_BY(clock_mu_);

  absl::Mutex checkpoint_mu_;
  absl::Time last_checkpoint_time_ ABSL_GUARDED_BY(checkpoint_mu_);
  std::atomic<int64_t> checkpoint_step_{-1};

  std::atomic<bool> shut_down_{false};
  std::atomic<int64_t> pushes_{0}, pulls_{0}, refused_{0}, bytes_pushed_{0}, bytes_pulled_{0};
  std::atomic<int64_t> steps_completed_short_{0}, apply_nanos_{0};
};

absl::Status ParameterServerImpl::Refuse(absl::Status status) {
  refused_.fetch_add(1);
  spdlog::warn("refused: {}: {}", absl::StatusCodeToString(status.code()), std::string(status.message()));
  return status;
}

absl::StatusOr<int> ParameterServerImpl::TouchSession(uint64_t session) {
  absl::StatusOr<int> rank = membership_.Touch(session);
  if (!rank.ok()) return Refuse(rank.status());
  return rank;
}

absl::StatusOr<Registration> ParameterServerImpl::Register(int rank, const JobView& view) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  if (rank < 0 || rank >= options_.job.num_workers) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "worker rank ", rank, " is out of range; this job has ", options_.job.num_workers, " workers")));
  }
  if (view.layout_hash == 0) {
    return Refuse(absl::InvalidArgumentError("registration carries no layout hash"));
  }
  uint64_t expected_hash = 0;
  job_layout_hash_.compare_exchange_strong(expected_hash, view.layout_hash);
  JobView ours = options_.job;
  ours.layout_hash = job_layout_hash_.load();
  if (absl::Status agree = CheckJobViewsAgree(ours, view); !agree.ok()) {
    return Refuse(absl::FailedPreconditionError(
        absl::StrCat("worker ", rank, " refused by server ", options_.server_id, ": ", agree.message())));
  }
  Registration reg;
  reg.current_step = CurrentStep();
  reg.heartbeat_interval = options_.heartbeat_interval;
  reg.session_id = membership_.Register(rank, reg.current_step);
  {
    absl::MutexLock lock(&clock_mu_);
    pushed_keys_per_step_[rank].clear();
  }
  spdlog::info("worker {} registered (session {:016x}), continues at step {}", rank,
               reg.session_id, reg.current_step);
  return reg;
}

int64_t ParameterServerImpl::CurrentStep() {
  if (options_.job.mode != Mode::kSync) return membership_.MaxClock();
  return VersionRange().second;
}

void ParameterServerImpl::InstallKeys(KeyMap map) {
  key_map_ = std::make_unique<KeyMap>(std::move(map));
  for (const ChunkInfo& c : key_map_->ChunksOfServer(options_.server_id)) {
    keys_.push_back(std::make_unique<KeyState>(c, optimizer_->NumSlots(), options_.job.num_workers));
    by_key_[c.key] = keys_.back().get();
  }
  job_layout_hash_ = LayoutHash(key_map_->layout());
  initialized_ = true;
}

absl::StatusOr<wire::InitOutcome> ParameterServerImpl::Init(uint64_t session, const Layout& layout,
                                                            const std::vector<ChunkPayload>& chunks) {
  absl::StatusOr<int> rank = TouchSession(session);
  if (!rank.ok()) return rank.status();
  absl::MutexLock lock(&init_mu_);
  if (initialized_) {
    if (layout != key_map_->layout()) {
      return Refuse(absl::FailedPreconditionError(absl::StrCat(
          "Init with layout {", LayoutDebugString(layout), "} refused: server ", options_.server_id,
          " was initialised with {", LayoutDebugString(key_map_->layout()), "}")));
    }
    return wire::INIT_ALREADY_DONE;
  }
  const uint64_t hash = LayoutHash(layout);
  if (job_layout_hash_ != 0 && job_layout_hash_ != hash) {
    return Refuse(absl::FailedPreconditionError(absl::StrCat(
        "Init layout hash ", absl::Hex(hash), " differs from the registered job's ",
        absl::Hex(job_layout_hash_.load()))));
  }
  absl::StatusOr<KeyMap> map = KeyMap::Build(layout, options_.job.num_servers, options_.job.partition_bytes);
  if (!map.ok()) return Refuse(map.status());
  const std::vector<ChunkInfo> owned = map->ChunksOfServer(options_.server_id);
  absl::flat_hash_map<ChunkKey, const ChunkPayload*> given;
  for (const ChunkPayload& c : chunks) {
    if (absl::Status owned_here = CheckOwned(*map, c.key, options_.server_id); !owned_here.ok()) {
      return Refuse(owned_here);
    }
    if (absl::Status valid = ValidatePayload("initial value", c, map->Find(c.key)->length, /*bfloat16_allowed=*/false); !valid.ok()) {
      return Refuse(valid);
    }
    if (!given.emplace(c.key, &c).second) return Refuse(absl::InvalidArgumentError(absl::StrCat("Init names key ", KeyName(c.key), " twice")));
  }
  for (const ChunkInfo& c : owned) {
    if (!given.contains(c.key)) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("Init lacks key ", KeyName(c.key), " of server ", options_.server_id)));
    }
  }
  InstallKeys(*std::move(map));
  for (auto& k : keys_) {
    absl::MutexLock key_lock(&k->mu);
    k->UpdateWeights([&](const float*, float* to) {
      CopyPayload(given[k->info.key]->pieces, reinterpret_cast<char*>(to));
    });
  }
  spdlog::info("initialised by worker {}: {} keys, {} bytes of layout {{{}}}", *rank, keys_.size(),
               key_map_->BytesOfServer(options_.server_id), LayoutDebugString(layout));
  return wire::INIT_APPLIED;
}

absl::StatusOr<KeyState*> ParameterServerImpl::FindOwned(const ChunkKey& key) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) return it->second;
  absl::Status not_owned = CheckOwned(*key_map_, key, options_.server_id);
  return not_owned.ok() ? absl::InternalError(absl::StrCat("owned key ", KeyName(key), " has no state")) : not_owned;
}

std::pair<int64_t, int64_t> ParameterServerImpl::VersionRange() {
  if (!initialized_ || keys_.empty()) return {0, 0};
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const auto& k : keys_) {
    const int64_t v = k->version.load();
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {lo, hi};
}

absl::StatusOr<std::vector<wire::PushOutcome>> ParameterServerImpl::Push(
    uint64_t session, int64_t step, const std::vector<ChunkPayload>& chunks) {
  if (shut_down_) return absl::UnavailableError("server is shutting down");
  const FlushDenormals flush;  // gradient sums and the optimizer
  absl::StatusOr<int> rank = TouchSession(session);
  if (!rank.ok()) return rank.status();
  if (!initialized_) return Refuse(absl::FailedPreconditionError(absl::StrCat("server ", options_.server_id, " is not initialised: call Init first")));
  if (step < 0) return Refuse(absl::InvalidArgumentError(absl::StrCat("push step is ", step, "; want >= 0")));
  if (chunks.empty()) return Refuse(absl::InvalidArgumentError("push carries no chunks"));

  // Validate everything before touching any key.
  std::vector<KeyState*> states;
  absl::flat_hash_set<ChunkKey> seen;
  for (const ChunkPayload& c : chunks) {
    absl::StatusOr<KeyState*> k = FindOwned(c.key);
    if (!k.ok()) return Refuse(k.status());
    if (!seen.insert(c.key).second) return Refuse(absl::InvalidArgumentError(absl::StrCat("push names key ", KeyName(c.key), " twice")));
    if (absl::Status valid = ValidatePayload("gradient", c, (*k)->info.length, /*bfloat16_allowed=*/true); !valid.ok()) return Refuse(valid);
    if (options_.job.mode == Mode::kSync) {
      absl::MutexLock lock(&(*k)->mu);
      const int64_t version = (*k)->version;
      if ((*k)->last_pushed_step[*rank] != step && version != step) {
        return Refuse(absl::FailedPreconditionError(absl::StrCat(
            "push for step ", step, " refused: key ", KeyName(c.key), " is at step ", version)));
      }
    }
    states.push_back(*k);
  }

  std::vector<wire::PushOutcome> outcomes;
  bool applied_any = false;
  for (size_t i = 0; i < chunks.size(); ++i) {
    KeyState& k = *states[i];
    const ChunkPayload& grad = chunks[i];
    absl::Status error;
    const wire::PushOutcome outcome = options_.job.mode == Mode::kSync
                                          ? PushSync(k, *rank, step, grad, error)
                                          : PushAsync(k, *rank, step, grad, error);
    if (!error.ok()) return Refuse(error);
    outcomes.push_back(outcome);
    if (outcome != wire::PUSH_DUPLICATE) {
      NoteClock(*rank, step);
      bytes_pushed_.fetch_add(PayloadBytes(grad.pieces));
    }
    applied_any |= outcome != wire::PUSH_DUPLICATE;
  }
  pushes_.fetch_add(1);
  if (applied_any) WakeReadyPulls();
  return outcomes;
}

wire::PushOutcome ParameterServerImpl::PushSync(KeyState& k, int rank, int64_t step,
                                                const ChunkPayload& grad, absl::Status& error) {
  absl::MutexLock lock(&k.mu);
  if (k.last_pushed_step[rank] == step) return wire::PUSH_DUPLICATE;
  if (k.version != step) {
    error = absl::FailedPreconditionError(absl::StrCat("push for step ", step, " refused: key ",
                                                       KeyName(k.info.key), " is at step ", k.version.load()));
    return wire::PUSH_OUTCOME_UNSPECIFIED;
  }
  if (k.grad_sum.empty()) {
    k.grad_sum.assign(k.info.length, 0.0f);
    k.contributed.assign(options_.job.num_workers, false);
  }
  float* sum = k.grad_sum.data();
  ForEachGradientBlock(grad.pieces, grad.dtype, [sum](int64_t first, const UnalignedFloat* __restrict values, int64_t n) {
    float* __restrict out = sum + first;
    for (int64_t i = 0; i < n; ++i) out[i] += values[i];
  });
  k.contributed[rank] = true;
  ++k.contributors;
  k.last_pushed_step[rank] = step;
  return CompleteSyncStepIfReady(k) ? wire::PUSH_APPLIED : wire::PUSH_BUFFERED;
}

bool ParameterServerImpl::CompleteSyncStepIfReady(KeyState& k) {
  if (k.contributors == 0) return false;
  const std::vector<bool> required = membership_.RequiredForStep(k.version);
  for (size_t r = 0; r < required.size(); ++r) {
    if (required[r] && !k.contributed[r]) return false;
  }
  if (k.contributors < options_.job.num_workers) steps_completed_short_.fetch_add(1);
  const float count = static_cast<float>(k.contributors);
  float* __restrict sum = k.grad_sum.data();
  for (int64_t i = 0; i < k.info.length; ++i) sum[i] /= count;
  ApplyTimed(k, sum);
  std::fill(k.grad_sum.begin(), k.grad_sum.end(), 0.0f);
  std::fill(k.contributed.begin(), k.contributed.end(), false);
  k.contributors = 0;
  return true;
}

wire::PushOutcome ParameterServerImpl::PushAsync(KeyState& k, int rank, int64_t step,
                                                 const ChunkPayload& grad, absl::Status& error) {
  absl::MutexLock lock(&k.mu);
  if (k.last_pushed_step[rank] == step) return wire::PUSH_DUPLICATE;
  if (step < k.last_pushed_step[rank]) {
    error = absl::FailedPreconditionError(absl::StrCat(
        "push for step ", step, " refused: worker ", rank, " already pushed step ",
        k.last_pushed_step[rank], " for key ", KeyName(k.info.key)));
    return wire::PUSH_OUTCOME_UNSPECIFIED;
  }
  k.last_pushed_step[rank] = step;
  ApplyTimed(k, grad);
  return wire::PUSH_APPLIED;
}

void ParameterServerImpl::ApplyTimed(KeyState& k, const float* grad) {
  ApplyTimed(k, ChunkPayload{k.info.key, wire::DTYPE_FLOAT32,
                             {absl::string_view(reinterpret_cast<const char*>(grad), k.info.length * 4)}});
}

void ParameterServerImpl::ApplyTimed(KeyState& k, const ChunkPayload& grad) {
  const FlushDenormals flush;
  const absl::Time start = absl::Now();
  absl::InlinedVector<float*, 2> slots(k.slots.size());
  k.UpdateWeights([&](const float* from, float* to) {
    ForEachGradientBlock(grad.pieces, grad.dtype, [&](int64_t first, const UnalignedFloat* values, int64_t n) {
      for (size_t s = 0; s < slots.size(); ++s) slots[s] = k.slots[s].data() + first;
      optimizer_->Apply(k.version, n, values, from + first, to + first, slots.data());
    });
  });
  k.version.fetch_add(1);
  apply_nanos_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start));
}

void ParameterServerImpl::NoteClock(int rank, int64_t step) {
  bool finished = false;
  {
    absl::MutexLock lock(&clock_mu_);
    auto& per_step = pushed_keys_per_step_[rank];
    finished = ++per_step[step] == static_cast<int>(keys_.size());
    if (finished) per_step.erase(per_step.begin(), per_step.upper_bound(step));
  }
  if (finished) membership_.AdvanceClock(rank, step + 1);
}

bool ParameterServerImpl::PullReady(const PendingPull& pull) {
  switch (options_.job.mode) {
    case Mode::kAsync:
      return true;
    case Mode::kSsp:
      return membership_.MinLiveClock() >= pull.step - options_.job.staleness;
    case Mode::kSync:
      for (const ChunkKey& key : pull.keys) {
        if (by_key_.at(key)->version < pull.step) return false;
      }
      return true;
  }
  return true;
}

void ParameterServerImpl::CompletePull(PendingPull pull) {
  std::vector<PulledChunk> out;
  out.reserve(pull.keys.size());
  for (const ChunkKey& key : pull.keys) {
    KeyState& k = *by_key_.at(key);
    PulledChunk chunk{key, 0, nullptr};
    {
      absl::MutexLock lock(&k.mu);
      chunk.version = k.version;
      chunk.weights = k.weights;
    }
    bytes_pulled_.fetch_add(static_cast<int64_t>(chunk.weights->size()) * pull.value_bytes);
    out.push_back(std::move(chunk));
  }
  pulls_.fetch_add(1);
  pull.done(std::move(out));
}

void ParameterServerImpl::WakeReadyPulls() {
  for (PendingPull& p : waiters_.TakeReady([this](const PendingPull& p) { return PullReady(p); })) {
    CompletePull(std::move(p));
  }
}

void ParameterServerImpl::Pull(uint64_t session, int64_t step, std::vector<ChunkKey> keys, wire::DType answer,
                               absl::Time deadline, PullDone done) {
  if (shut_down_) return done(absl::UnavailableError("server is shutting down"));
  absl::StatusOr<int> rank = TouchSession(session);
  if (!rank.ok()) return done(rank.status());
  if (!initialized_) {
    return done(Refuse(absl::FailedPreconditionError(absl::StrCat("server ", options_.server_id, " is not initialised: call Init first"))));
  }
  if (step < 0) return done(Refuse(absl::InvalidArgumentError(absl::StrCat("pull step is ", step, "; want >= 0"))));
  if (keys.empty()) return done(Refuse(absl::InvalidArgumentError("pull names no keys")));
  for (const ChunkKey& key : keys) {
    if (absl::StatusOr<KeyState*> k = FindOwned(key); !k.ok()) return done(Refuse(k.status()));
  }
  PendingPull pull{*rank, step, std::move(keys), ValueBytes(answer), deadline, std::move(done)};
  std::optional<PendingPull> ready =
      waiters_.AddUnlessReady(std::move(pull), [this](const PendingPull& p) { return PullReady(p); });
  if (ready) CompletePull(*std::move(ready));
}

absl::StatusOr<int64_t> ParameterServerImpl::Heartbeat(uint64_t session) {
  absl::StatusOr<int> rank = TouchSession(session);
  if (!rank.ok()) return rank.status();
  return CurrentStep();
}

void ParameterServerImpl::Tick() {
  const std::vector<int> dead = membership_.ExpireSilent();
  for (int rank : dead) {
    spdlog::warn("worker {} declared dead: silent for more than {}; steps continue without it",
                 rank, absl::FormatDuration(options_.worker_timeout));
  }
  if (!dead.empty() && initialized_) {
    for (auto& k : keys_) {
      absl::MutexLock lock(&k->mu);
      CompleteSyncStepIfReady(*k);
    }
  }
  if (!dead.empty()) WakeReadyPulls();
  for (PendingPull& p : waiters_.TakeExpired(clock_->Now())) {
    refused_.fetch_add(1);
    p.done(absl::DeadlineExceededError(absl::StrCat(
        "pull for step ", p.step, " by worker ", p.rank, " not ready by its deadline on server ",
        options_.server_id)));
  }
  MaybeCheckpoint();
}

absl::StatusOr<ShardSnapshot> ParameterServerImpl::Snapshot(bool require_equal_versions) {
  ShardSnapshot shard;
  shard.server_id = options_.server_id;
  shard.num_servers = options_.job.num_servers;
  shard.mode = options_.job.mode;
  shard.layout = key_map_->layout();
  shard.partition_bytes = options_.job.partition_bytes;
  shard.optimizer = OptimizerName(options_.optimizer.kind);
  for (auto& k : keys_) {
    absl::MutexLock lock(&k->mu);
    shard.keys.push_back(KeySnapshot{k->info.key, k->version, *k->weights, k->slots});
  }
  if (require_equal_versions) {
    for (const KeySnapshot& k : shard.keys) {
      if (k.version != shard.keys.front().version) {
        return absl::UnavailableError("a sync step is in progress");
      }
    }
  }
  return shard;
}

absl::StatusOr<std::string> ParameterServerImpl::WriteCheckpoint(bool require_equal_versions) {
  absl::MutexLock lock(&checkpoint_mu_);
  absl::StatusOr<ShardSnapshot> shard = Snapshot(require_equal_versions);
  if (!shard.ok()) return shard.status();
  const std::string path = ShardCheckpointPath(options_.checkpoint_dir, options_.server_id,
                                               options_.job.num_servers);
  if (absl::Status written = WriteShardCheckpoint(path, *shard); !written.ok()) {
    spdlog::error("checkpoint failed: {}", std::string(written.message()));
    return written;
  }
  checkpoint_step_ = shard->Step();
  last_checkpoint_time_ = clock_->Now();
  spdlog::info("checkpoint of step {} written to {}", shard->Step(), path);
  return path;
}

void ParameterServerImpl::MaybeCheckpoint() {
  if (options_.checkpoint_dir.empty() || !initialized_ || shut_down_) return;
  bool due = false;
  const int64_t min_version = VersionRange().first;
  if (options_.checkpoint_every_steps > 0 &&
      min_version >= std::max<int64_t>(checkpoint_step_, 0) + options_.checkpoint_every_steps) {
    due = true;
  }
  if (options_.checkpoint_every > absl::ZeroDuration()) {
    absl::MutexLock lock(&checkpoint_mu_);
    due |= clock_->Now() - last_checkpoint_time_ >= options_.checkpoint_every;
  }
  // A sync checkpoint holds one step for every key; try again next tick if a
  // step is half applied.
  if (due) (void)WriteCheckpoint(options_.job.mode == Mode::kSync);
}

absl::StatusOr<std::string> ParameterServerImpl::CheckpointNow() {
  if (options_.checkpoint_dir.empty()) {
    return Refuse(absl::FailedPreconditionError("no --checkpoint_dir is configured"));
  }
  if (!initialized_) return Refuse(absl::FailedPreconditionError("nothing to checkpoint: not initialised"));
  return WriteCheckpoint(/*require_equal_versions=*/false);
}

absl::Status ParameterServerImpl::Restore() {
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  const std::string path = ShardCheckpointPath(options_.checkpoint_dir, options_.server_id,
                                               options_.job.num_servers);
  absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(path);
  if (absl::IsNotFound(shard.status())) {
    spdlog::info("no checkpoint at {}; starting fresh", path);
    return absl::OkStatus();
  }
  if (!shard.ok()) return shard.status();
  auto mismatch = [&](const char* field, auto file, auto ours) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has ", field, " ", file,
                                                      " but this server has ", ours));
  };
  if (shard->mode != options_.job.mode) return mismatch("mode", ModeName(shard->mode), ModeName(options_.job.mode));
  if (shard->partition_bytes != options_.job.partition_bytes) {
    return mismatch("partition_bytes", shard->partition_bytes, options_.job.partition_bytes);
  }
  if (shard->optimizer != OptimizerName(options_.optimizer.kind)) {
    return mismatch("optimizer", shard->optimizer, OptimizerName(options_.optimizer.kind));
  }
  absl::StatusOr<KeyMap> map = KeyMap::Build(shard->layout, options_.job.num_servers, options_.job.partition_bytes);
  if (!map.ok()) return absl::DataLossError(map.status().message());
  absl::MutexLock lock(&init_mu_);
  InstallKeys(*std::move(map));
  if (shard->keys.size() != keys_.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " holds ", shard->keys.size(),
                                            " keys; this server owns ", keys_.size()));
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    KeyState& k = *keys_[i];
    KeySnapshot& s = shard->keys[i];
    absl::MutexLock key_lock(&k.mu);
    if (!(s.key == k.info.key) || static_cast<int64_t>(s.weights.size()) != k.info.length ||
        s.slots.size() != k.slots.size()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, " does not match key ", KeyName(k.info.key)));
    }
    k.weights = std::make_shared<std::vector<float>>(std::move(s.weights));
    k.slots = std::move(s.slots);
    k.version = s.version;
  }
  checkpoint_step_ = shard->Step();
  spdlog::info("restored step {} from {} ({} keys)", shard->Step(), path, keys_.size());
  return absl::OkStatus();
}

ServerStats ParameterServerImpl::Stats() {
  ServerStats s;
  s.initialized = initialized_;
  if (s.initialized) {
    s.num_keys = static_cast<int>(keys_.size());
    s.owned_bytes = key_map_->BytesOfServer(options_.server_id);
    std::tie(s.min_version, s.max_version) = VersionRange();
  }
  s.live_workers = membership_.LiveCount();
  s.dead_workers_total = membership_.DeadTotal();
  s.pushes = pushes_;
  s.pulls = pulls_;
  s.refused = refused_;
  s.bytes_pushed = bytes_pushed_;
  s.bytes_pulled = bytes_pulled_;
  s.steps_completed_short = steps_completed_short_;
  s.apply_seconds = static_cast<double>(apply_nanos_) * 1e-9;
  s.checkpoint_step = checkpoint_step_;
  return s;
}

void ParameterServerImpl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  for (PendingPull& p : waiters_.TakeAll()) {
    p.done(absl::UnavailableError("server is shutting down"));
  }
  if (!options_.checkpoint_dir.empty() && options_.checkpoint_on_shutdown && initialized_) {
    (void)WriteCheckpoint(/*require_equal_versions=*/false);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(const ServerOptions& options,
                                                                         Clock* clock) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  auto server = std::make_unique<ParameterServerImpl>(options, clock);
  if (absl::Status restored = server->Restore(); !restored.ok()) return restored;
  return server;
}

}  // namespace shardps
