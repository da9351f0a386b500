#include "worker/trainer.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/process_cpu.h"
#include "client/pending_call.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

// A job that keeps asking this worker to line up again without a step
// succeeding in between is not recovering.
constexpr int kMaxRejoinsInARow = 10;


}  // namespace

Trainer::Trainer(const TrainerOptions& options, Model* model, PsClient* client, const Dataset* train,
                 const Dataset* test)
    : options_(options),
      model_(model),
      client_(client),
      train_(train),
      test_(test),
      divergence_(options.job) {
  for (const TensorSpec& t : model_->layout().tensors) {
    host_weights_.emplace_back(model_->backend(), t.NumElements());
    host_grads_.emplace_back(model_->backend(), t.NumElements());
  }
  batch_images_.resize(static_cast<size_t>(options_.batch_size) * train_->ImageSize());
  batch_labels_.resize(options_.batch_size);
  pulls_ahead_.resize(model_->num_layers());
  pushes_.resize(model_->num_layers());
}

std::vector<TensorOut> Trainer::WeightsOf(int layer) {
  std::vector<TensorOut> outs;
  for (uint32_t t : model_->TensorsOfLayer(layer)) outs.push_back({t, host_weights_[t].data()});
  return outs;
}

absl::Status Trainer::DrainTransfers() {
  absl::Status failure;
  for (auto& p : pulls_ahead_) WaitAndKeepError(p, failure);
  const absl::Time start = absl::Now();
  for (auto& p : pushes_) WaitAndKeepError(p, failure);
  split_.push_wait += Seconds(start);
  return failure;
}

void Trainer::LoadBatch(const Dataset& data, const int64_t* indices, int count) {
  const int64_t size = data.ImageSize();
  for (int i = 0; i < count; ++i) {
    std::copy_n(&data.images[indices[i] * size], size, &batch_images_[i * size]);
    batch_labels_[i] = data.labels[indices[i]];
  }
  model_->SetBatch(count, batch_images_.data(), batch_labels_.data());
}

void Trainer::TraceSpan(const char* track, absl::string_view what, int64_t index, absl::Time start,
                        int64_t step) const {
  if (options_.trace == nullptr) return;  // no name built on an untraced step
  std::string name = index < 0 ? std::string(what) : absl::StrCat(what, " ", index);
  options_.trace->Span(track, std::move(name), start, absl::Now(), {{"step", step}});
}

// Keeps the first failure of a step's calls, a rejoin before any other.
void Trainer::Wait(PendingCall& p, double& bucket, absl::Status& failure) {
  const absl::Time start = absl::Now();
  const bool ready = p.done.HasBeenNotified();
  p.done.WaitForNotification();
  bucket += Seconds(start);
  if (!ready) TraceSpan("wait", "wait for a transfer", -1, start, -1);
  KeepFirstError(failure, p.status);
}

absl::Status Trainer::Forward(int64_t step) {
  const int layers = model_->num_layers();
  Backend& be = model_->backend();
  // Every layer's weights are in flight from here on (pulled ahead by the last
  // step, or pulled now in forward order); forward waits per layer.
  std::vector<std::shared_ptr<PendingCall>> pulls(layers);
  for (int l = 0; l < layers; ++l) {
    if (model_->TensorsOfLayer(l).empty()) continue;
    pulls[l] = std::move(pulls_ahead_[l]);
    if (pulls[l]) continue;
    pulls[l] = std::make_shared<PendingCall>();
    client_->PullAsync(step, WeightsOf(l), pulls[l]->Callback());
  }
  absl::Status failure;
  for (int l = 0; l < layers; ++l) {
    if (pulls[l]) {
      Wait(*pulls[l], split_.pull_wait, failure);
      pulls[l].reset();
      if (!failure.ok()) break;
    }
    const absl::Time start = absl::Now();
    for (uint32_t t : model_->TensorsOfLayer(l)) be.CopyIn(model_->weights(t), host_weights_[t].data(), host_weights_[t].size());
    model_->ForwardLayer(l);
    split_.compute += Seconds(start);
    TraceSpan("compute", "forward", l, start, step);
  }
  // After a failure, the pulls still in flight must finish before this step
  // returns: they write host buffers.
  for (auto& p : pulls) {
    if (p) Wait(*p, split_.pull_wait, failure);
  }
  if (!failure.ok()) return failure;
  return be.status();
}

absl::Status Trainer::BackwardAndPush(int64_t step, bool pull_ahead) {
  Backend& be = model_->backend();
  absl::Status failure;
  for (int l = model_->num_layers() - 1; l >= 0; --l) {
    const absl::Time start = absl::Now();
    model_->BackwardLayer(l);
    split_.compute += Seconds(start);
    TraceSpan("compute", "backward", l, start, step);
    if (model_->TensorsOfLayer(l).empty()) continue;
    // The last step's push of this layer borrowed its host buffers: done by now, as a rule.
    const absl::Time wait = absl::Now();
    WaitAndKeepError(pushes_[l], failure);
    split_.push_wait += Seconds(wait);
    if (!failure.ok()) break;
    const absl::Time copy = absl::Now();
    std::vector<TensorIn> ins;
    for (uint32_t t : model_->TensorsOfLayer(l)) {
      be.CopyOut(host_grads_[t].data(), model_->grads(t), host_grads_[t].size());
      ins.push_back({t, host_grads_[t].data()});
    }
    split_.compute += Seconds(copy);
    // Layer l's weights were copied in during forward, so its host buffer is
    // free for the next step's pull.
    if (pull_ahead) pulls_ahead_[l] = std::make_shared<PendingCall>();
    pushes_[l] = PushThenPullAhead(*client_, step, std::move(ins), WeightsOf(l), pulls_ahead_[l]);
  }
  if (!failure.ok()) return failure;
  return be.status();
}

absl::Status Trainer::Step(int64_t step, const std::vector<int64_t>& indices, bool pull_ahead, float* loss,
                           int* correct) {
  {
    absl::MutexLock lock(&progress_mu_);
    progress_.step = step;
  }
  const absl::Time step_start = absl::Now();
  LoadBatch(*train_, indices.data(), static_cast<int>(indices.size()));
  if (absl::Status forward = Forward(step); !forward.ok()) return forward;
  const absl::Time start = absl::Now();
  model_->ComputeLoss(loss, correct);
  split_.compute += Seconds(start);
  // A loss that is not finite makes gradients the servers refuse: stop here.
  if (std::optional<std::string> diverged = divergence_.CheckStep(step, *loss)) {
    spdlog::error("{}", *diverged);
    return absl::FailedPreconditionError(*diverged);
  }
  absl::Status pushed = BackwardAndPush(step, pull_ahead);
  TraceSpan("step", "step", step, step_start, step);
  return pushed;
}

uint64_t WeightsFingerprint(const std::vector<HostBuffer>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const HostBuffer& t : tensors) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(t.data());
    for (int64_t i = 0; i < t.size() * static_cast<int64_t>(sizeof(float)); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

absl::StatusOr<double> Trainer::Evaluate(int64_t step) {
  if (absl::Status drained = DrainTransfers(); !drained.ok()) return drained;
  std::vector<TensorOut> outs;
  for (uint32_t t = 0; t < host_weights_.size(); ++t) outs.push_back({t, host_weights_[t].data()});
  if (absl::Status s = client_->Pull(step, std::move(outs)); !s.ok()) return s;
  Backend& be = model_->backend();
  for (uint32_t t = 0; t < host_weights_.size(); ++t) be.CopyIn(model_->weights(t), host_weights_[t].data(), host_weights_[t].size());
  int64_t right = 0;
  std::vector<int64_t> indices(options_.batch_size);
  for (int64_t first = 0; first < test_->count; first += options_.batch_size) {
    const int count = static_cast<int>(std::min<int64_t>(options_.batch_size, test_->count - first));
    for (int i = 0; i < count; ++i) indices[i] = first + i;
    LoadBatch(*test_, indices.data(), count);
    for (int l = 0; l < model_->num_layers(); ++l) model_->ForwardLayer(l);
    float loss;
    int correct;
    model_->ComputeLoss(&loss, &correct);
    right += correct;
  }
  if (!be.status().ok()) return be.status();
  return static_cast<double>(right) / test_->count;
}

absl::StatusOr<int64_t> Trainer::Join() {
  absl::StatusOr<int64_t> step = client_->Register();
  if (!step.ok()) return step.status();
  if (absl::Status s = client_->Init(model_->InitialWeights(options_.seed)); !s.ok()) return s;
  return step;
}

absl::StatusOr<int64_t> Trainer::Rejoin(int64_t step, const absl::Status& why, TrainSummary& summary) {
  DrainTransfers().IgnoreError();  // the job is lining up again: their errors are old news
  spdlog::warn("step {}: {}; lining up with the job again", step, std::string(why.message()));
  absl::StatusOr<int64_t> back = Join();
  if (!back.ok()) return back.status();
  ++summary.rejoins;
  if (*back < step) summary.steps_redone += step - *back;
  spdlog::warn("rejoined the job at step {} (this worker was at step {}{})", *back, step,
               *back < step ? absl::StrCat("; ", step - *back, " steps to redo") : "");
  return back;
}

absl::Status Trainer::CheckReady() const {
  for (size_t t = 0; t < host_weights_.size(); ++t) {
    if (host_weights_[t].data() == nullptr || host_grads_[t].data() == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate host buffers for tensor ", t, " on ",
                                                       model_->backend().name()));
    }
  }
  if (StepsPerEpoch() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("a worker's share of ", train_->count / options_.num_workers,
                                                   " samples holds no batch of ", options_.batch_size));
  }
  return absl::OkStatus();
}

absl::Status Trainer::ReportFinishedJob(int64_t total, TrainSummary& summary) {
  spdlog::warn("the job was already trained to its last step, {}: nothing to train", total);
  if (options_.rank != options_.eval_rank || test_ == nullptr) return absl::OkStatus();
  absl::StatusOr<double> accuracy = Evaluate(total);
  if (!accuracy.ok()) return accuracy.status();
  summary.final_test_accuracy = *accuracy;
  summary.final_weights_fnv1a = WeightsFingerprint(host_weights_);
  spdlog::info("test accuracy of the trained job: {}", *accuracy);
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  if (absl::Status ready = CheckReady(); !ready.ok()) return ready;
  const int64_t per_epoch = StepsPerEpoch();
  const int64_t total = per_epoch * options_.epochs;
  absl::StatusOr<int64_t> joined = Join();
  if (!joined.ok()) return joined.status();
  TrainSummary summary;
  summary.first_step = *joined;
  if (*joined > 0) spdlog::info("joined the job at step {} (epoch {}, batch {})", *joined, *joined / per_epoch, *joined % per_epoch);
  const absl::Time run_start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  progress_mu_.Lock();
  run_start_ = run_start;
  progress_mu_.Unlock();
  EpochProgress p;
  int failures_in_a_row = 0;
  // The last step of an epoch whose end (evaluation) is still to run, or -1.
  int64_t epoch_end = -1;
  for (int64_t step = *joined; step < total || epoch_end >= 0;) {
    absl::Status s;
    if (epoch_end >= 0) {
      s = EndEpoch(epoch_end, p, summary);
      if (s.ok()) epoch_end = -1;
    } else {
      if (step / per_epoch != p.epoch) p = StartEpoch(static_cast<int>(step / per_epoch));
      const int64_t i = step % per_epoch;
      const std::vector<int64_t> batch(p.shard.begin() + i * options_.batch_size,
                                       p.shard.begin() + (i + 1) * options_.batch_size);
      float loss = 0;
      int correct = 0;
      s = Step(step, batch, step + 1 < total, &loss, &correct);
      if (s.ok()) {
        Record(loss, correct, i, per_epoch, p, summary);
        if (i + 1 == per_epoch) epoch_end = step;
        ++step;
      }
    }
    if (s.ok()) {
      failures_in_a_row = 0;
      continue;
    }
    DrainTransfers().IgnoreError();  // `s` is the error that counts
    if (!IsRejoin(s) || ++failures_in_a_row > kMaxRejoinsInARow) {
      return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
    }
    absl::StatusOr<int64_t> back = Rejoin(step, s, summary);
    if (!back.ok()) return back.status();
    // An epoch's end is evaluated when the job goes on right after it;
    // otherwise the epoch ends again later, or the job moved past it.
    if (epoch_end >= 0 && *back != epoch_end + 1) epoch_end = -1;
    if (epoch_end < 0 && *back / per_epoch != p.epoch) p.epoch = -1;  // that epoch starts over
    step = *back;
  }
  if (absl::Status drained = DrainTransfers(); !drained.ok()) return drained;
  if (*joined >= total && total > 0) {
    if (absl::Status reported = ReportFinishedJob(total, summary); !reported.ok()) return reported;
  }
  summary.samples = summary.steps * options_.batch_size;
  summary.wall_seconds = Seconds(run_start);
  summary.samples_per_second = summary.samples / summary.wall_seconds;
  summary.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  summary.bytes_per_step = 2 * model_->layout().TotalBytes() / 4 * options_.wire_value_bytes;
  summary.split = split_;
  return summary;
}

}  // namespace shardps
