// emulated_worker: a worker whose compute is a fixed time per step, on a
// synthetic layout, for the scaling harness. It talks to real servers
// exactly as ps_worker does (client/ps_client): every tensor's pull is issued
// at the start of a step and the forward pass of tensor t waits only for it;
// backward pushes each tensor as soon as its share of the compute time has
// passed, last tensor first; the step ends with backward (its pushes complete
// while the next step computes).
// Compute time is spread over tensors by size: 1/3 forward, 2/3 backward.
// Small consecutive tensors travel together in buckets (--bucket_bytes), as
// a real model's layers group a weight with its bias.
//
// With --pull_ahead (default), as in ps_worker, a tensor's pull for the
// next step leaves with its push (sync) or once the push is acknowledged
// (async, ssp): client/pending_call.h.
//
//   emulated_worker --servers=h0:7000,h1:7000 --rank=0 --num_workers=2 --mode=sync
//       --layout=resnet50/10 --compute_ms=190 --steps=40 --summary_json=out.json
// (one command line)
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/process_events.h"
#include "bench/synthetic_layout.h"
#include "common/command_line.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/process_cpu.h"
#include "common/trace.h"
#include "common/wire_dtype.h"
#include "client/pending_call.h"
#include "client/client_flags.h"
#include "client/ps_client.h"

ABSL_FLAG(std::string, layout, "resnet50/10", "resnet50/10, or comma-separated tensor sizes in floats.");
ABSL_FLAG(double, compute_ms, 190, "Emulated compute time per step (forward + backward).");
ABSL_FLAG(int, batch_size, 32, "Nominal samples per step, for samples/s.");
ABSL_FLAG(int, steps, 40, "Timed steps.");
ABSL_FLAG(int, warmup_steps, 3, "Untimed steps first.");
ABSL_FLAG(std::string, summary_json, "", "Write the run's figures here.");
ABSL_FLAG(int64_t, bucket_bytes, 0,
          "Consecutive tensors are pushed and pulled together in buckets of at least this many bytes (0: one "
          "tensor per call).");
ABSL_FLAG(bool, pull_ahead, true, "Pull a tensor for the next step as soon as its push is acknowledged.");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome/Perfetto trace (JSON) of every transfer and step phase here at the end. Empty: none.");

namespace shardps {
namespace {

struct Split {
  double pull_wait = 0, compute = 0, push_wait = 0;
};

double Since(absl::Time t) { return absl::ToDoubleSeconds(absl::Now() - t); }

// Sleeps until `end`, an absolute time, so that oversleeping one tensor is
// taken back from the next.
void ComputeUntil(absl::Time end) {
  const absl::Duration left = end - absl::Now();
  if (left > absl::ZeroDuration()) absl::SleepFor(left);
}

class EmulatedWorker {
 public:
  // Consecutive tensors are grouped into buckets of at least `bucket_bytes`
  // (the last may be smaller); a bucket is pushed and pulled as one call.
  // `trace` (may be null) records steps, compute and waits.
  EmulatedWorker(PsClient* client, const Layout& layout, absl::Duration compute, int64_t bucket_bytes, Trace* trace)
      : client_(client), layout_(layout), trace_(trace) {
    const int64_t total = layout.TotalBytes();
    int64_t open = 0;
    for (uint32_t t = 0; t < layout.tensors.size(); ++t) {
      weights_.emplace_back(layout.tensors[t].NumElements());
      grads_.emplace_back(layout.tensors[t].NumElements(), 1e-6f);
      if (buckets_.empty() || open >= bucket_bytes) {
        buckets_.emplace_back();
        share_.push_back(absl::ZeroDuration());
        open = 0;
      }
      buckets_.back().push_back(t);
      open += layout.tensors[t].NumElements() * 4;
      share_.back() += compute * (layout.tensors[t].NumElements() * 4.0 / total);
    }
    pulls_.resize(buckets_.size());
    pushes_.resize(buckets_.size());
  }

  // One step. With `pull_ahead`, each tensor's pull for the next step is
  // issued as soon as its push for this step is acknowledged, so weights
  // travel during the rest of backward instead of after it.
  absl::Status Step(int64_t step, bool pull_ahead, Split& split) {
    const absl::Time step_start = absl::Now();
    const int n = static_cast<int>(buckets_.size());
    for (int t = 0; t < n; ++t) {
      if (pulls_[t]) continue;  // pulled ahead by the last step
      pulls_[t] = std::make_shared<PendingCall>();
      client_->PullAsync(step, Outs(t), pulls_[t]->Callback());
    }
    absl::Status failure;
    absl::Time compute_end = absl::Now();
    for (int t = 0; t < n; ++t) {  // forward: a third of each tensor's share
      const absl::Time wait = absl::Now();
      const bool was_ready = pulls_[t]->done.HasBeenNotified();
      pulls_[t]->done.WaitForNotification();
      split.pull_wait += Since(wait);
      if (trace_ && !was_ready) trace_->Span("wait", absl::StrCat("wait for pull of bucket ", t), wait, absl::Now());
      if (!pulls_[t]->status.ok() && failure.ok()) failure = pulls_[t]->status;
      pulls_[t].reset();
      const absl::Time start = absl::Now();
      // Compute resumes when the weights arrive; a late sleep is taken back.
      if (!was_ready) compute_end = std::max(compute_end, start);
      compute_end += share_[t] / 3;
      ComputeUntil(compute_end);
      split.compute += Since(start);
      if (trace_) trace_->Span("compute", absl::StrCat("forward ", t), start, absl::Now(), {{"step", step}});
    }
    if (!failure.ok()) return failure;
    const absl::Time start = absl::Now();
    compute_end = start;
    for (int t = n - 1; t >= 0; --t) {  // backward: two thirds, pushing as it goes
      const absl::Time bucket_start = absl::Now();
      compute_end += share_[t] * 2 / 3;
      ComputeUntil(compute_end);
      if (trace_) trace_->Span("compute", absl::StrCat("backward ", t), bucket_start, absl::Now(), {{"step", step}});
      // The last step's push of this bucket borrowed its gradients: done by now, as a rule.
      const absl::Time wait = absl::Now();
      WaitAndKeepError(pushes_[t], failure);
      split.push_wait += Since(wait);
      if (pull_ahead) pulls_[t] = std::make_shared<PendingCall>();
      pushes_[t] = PushThenPullAhead(*client_, step, Ins(t), Outs(t), pulls_[t]);
    }
    split.compute += Since(start);
    if (trace_) trace_->Span("step", absl::StrCat("step ", step), step_start, absl::Now(), {{"step", step}});
    // The step ends here: its pushes complete while the next step computes,
    // and the next forward pass waits only for the weights it needs.
    return failure;
  }

  // Waits for the pushes still in flight; their wait counts as push wait.
  absl::Status DrainPushes(Split& split) {
    const absl::Time wait = absl::Now();
    absl::Status failure;
    for (auto& p : pushes_) WaitAndKeepError(p, failure);
    split.push_wait += Since(wait);
    return failure;
  }

  // Waits for pulls issued ahead (before the client goes away).
  void DrainPullsAhead() {
    for (auto& p : pulls_) {
      if (p) p->done.WaitForNotification();
      p.reset();
    }
  }

 private:
  std::vector<TensorOut> Outs(int bucket) {
    std::vector<TensorOut> outs;
    for (uint32_t t : buckets_[bucket]) outs.push_back({t, weights_[t].data()});
    return outs;
  }
  std::vector<TensorIn> Ins(int bucket) const {
    std::vector<TensorIn> ins;
    for (uint32_t t : buckets_[bucket]) ins.push_back({t, grads_[t].data()});
    return ins;
  }

  PsClient* const client_;
  const Layout layout_;
  Trace* const trace_;
  std::vector<std::vector<float>> weights_, grads_;
  std::vector<std::vector<uint32_t>> buckets_;    // tensor indices, in forward order
  std::vector<absl::Duration> share_;             // per bucket: its part of the compute time
  std::vector<std::shared_ptr<PendingCall>> pulls_;   // per bucket: in flight for the coming step
  std::vector<std::shared_ptr<PendingCall>> pushes_;  // per bucket: the last step's push, maybe in flight
};


int Fail(const absl::Status& s) {
  fprintf(stderr, "emulated_worker %d: %s\n", absl::GetFlag(FLAGS_rank), std::string(s.message()).c_str());
  return 1;
}

int Run() {
  absl::StatusOr<Layout> layout = SyntheticLayout(absl::GetFlag(FLAGS_layout));
  if (!layout.ok()) return Fail(layout.status());
  absl::StatusOr<ClientOptions> options = ClientOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  ClientOptions o = *std::move(options);
  o.layout = *layout;
  const std::string trace_file = absl::GetFlag(FLAGS_trace_file);
  std::unique_ptr<Trace> trace;
  if (!trace_file.empty()) trace = std::make_unique<Trace>(absl::StrCat("emulated_worker ", o.rank));
  o.trace = trace.get();
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(o);
  if (!client.ok()) return Fail(client.status());
  absl::StatusOr<int64_t> step = (*client)->Register();
  if (!step.ok()) return Fail(step.status());
  std::vector<std::vector<float>> init;
  for (const TensorSpec& t : layout->tensors) init.emplace_back(t.NumElements(), 0.01f);
  if (absl::Status s = (*client)->Init(init); !s.ok()) return Fail(s);

  EmulatedWorker worker(client->get(), *layout, absl::Milliseconds(absl::GetFlag(FLAGS_compute_ms)),
                        absl::GetFlag(FLAGS_bucket_bytes), trace.get());
  Split warm, split;
  const bool pull_ahead = absl::GetFlag(FLAGS_pull_ahead);
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup_steps); ++i, ++*step) {
    if (absl::Status s = worker.Step(*step, pull_ahead, warm); !s.ok()) {
      worker.DrainPullsAhead();
      worker.DrainPushes(warm).IgnoreError();  // the step's error is the one to report
      return Fail(s);
    }
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const double cpu_start = ProcessCpuSeconds();
  const int64_t waits_start = ProcessWaits();
  const absl::Time start = absl::Now();
  for (int i = 0; i < steps; ++i, ++*step) {
    const absl::Status s = worker.Step(*step, pull_ahead && i + 1 < steps, split);
    if (!s.ok()) {
      worker.DrainPullsAhead();
      worker.DrainPushes(split).IgnoreError();  // the step's error is the one to report
      return Fail(s);
    }
  }
  if (absl::Status s = worker.DrainPushes(split); !s.ok()) return Fail(s);
  const double wall = Since(start), cpu = ProcessCpuSeconds() - cpu_start;
  const int64_t waits = ProcessWaits() - waits_start;
  const double samples_per_s = steps * absl::GetFlag(FLAGS_batch_size) / wall;
  printf("rank %d: %d steps in %.2f s: %.1f samples/s, per step %.1f ms compute, %.1f ms pull wait, %.1f ms push wait\n",
         o.rank, steps, wall, samples_per_s, 1e3 * split.compute / steps, 1e3 * split.pull_wait / steps,
         1e3 * split.push_wait / steps);
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << absl::StrCat("{\"compute\": \"emulated\", \"layout\": \"", absl::GetFlag(FLAGS_layout),
                        "\", \"compute_ms\": ", absl::GetFlag(FLAGS_compute_ms), ", \"steps\": ", steps,
                        ", \"wall_seconds\": ", wall, ", \"samples_per_second\": ", samples_per_s,
                        ", \"bytes_per_step\": ", 2 * layout->TotalBytes() / 4 * ValueBytes(o.wire_dtype), ", \"cpu_seconds\": ", cpu,
                        ", \"waits\": ", waits,
                        ", \"time_split_seconds\": {\"pull_wait\": ", split.pull_wait,
                        ", \"compute\": ", split.compute, ", \"push_wait\": ", split.push_wait, "}}\n");
    if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write ", path)));
  }
  if (trace) {
    (*client)->Shutdown();  // every transfer recorded
    if (absl::Status s = trace->Write(trace_file); !s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  shardps::ParseJobCommandLine(argc, argv, "emulated_worker: a ShardPS worker with emulated compute, for scaling runs.",
                               shardps::ForeignFlags::kJobFlagsOnly);
  return shardps::Run();
}
