// Trainer's bookkeeping of epochs: the steps an epoch holds, each step's
// figures, the progress lines, an epoch's result, and the summary JSON.
#include "worker/trainer.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

}  // namespace

Trainer::EpochProgress Trainer::StartEpoch(int epoch) {
  EpochProgress p;
  p.epoch = epoch;
  p.shard = EpochShard(train_->count, options_.seed, epoch, options_.rank, options_.num_workers);
  p.start = p.window_start = absl::Now();
  p.split_before = split_;
  return p;
}

int64_t Trainer::StepsPerEpoch() const {
  int64_t steps = train_->count / options_.num_workers / options_.batch_size;
  if (options_.max_steps_per_epoch > 0) steps = std::min(steps, options_.max_steps_per_epoch);
  return steps;
}

void Trainer::LogProgress(const EpochProgress& p, int64_t done, int64_t per_epoch) {
  const double total = split_.pull_wait + split_.compute + split_.push_wait -
                       (p.split_before.pull_wait + p.split_before.compute + p.split_before.push_wait);
  auto share = [&](double now, double before) { return total > 0 ? 100.0 * (now - before) / total : 0.0; };
  spdlog::info(
      "epoch {} step {}/{} loss {:.4f} accuracy {:.3f} {:.0f} samples/s | pull wait {:.0f}% compute "
      "{:.0f}% push wait {:.0f}%",
      p.epoch, done, per_epoch, p.window_loss / p.window_steps,
      static_cast<double>(p.window_right) / (p.window_steps * options_.batch_size),
      p.window_steps * options_.batch_size / Seconds(p.window_start), share(split_.pull_wait, p.split_before.pull_wait),
      share(split_.compute, p.split_before.compute), share(split_.push_wait, p.split_before.push_wait));
}

absl::Status Trainer::EndEpoch(int64_t step, EpochProgress& p, TrainSummary& summary) {
  EpochResult result;
  result.epoch = p.epoch;
  result.seconds = Seconds(p.start);
  result.mean_loss = p.loss / p.steps;
  result.train_accuracy = static_cast<double>(p.right) / (p.steps * options_.batch_size);
  const bool evaluates = options_.rank == options_.eval_rank && test_ != nullptr;
  if (evaluates) {
    absl::StatusOr<double> accuracy = Evaluate(step + 1);
    if (!accuracy.ok()) return accuracy.status();  // Evaluate drained the pulls ahead
    result.test_accuracy = *accuracy;
    summary.final_test_accuracy = *accuracy;
    summary.final_weights_fnv1a = WeightsFingerprint(host_weights_);
  }
  spdlog::info("epoch {} done in {:.1f} s: mean loss {:.4f}, train accuracy {:.4f}{}", p.epoch, result.seconds,
               result.mean_loss, result.train_accuracy,
               evaluates ? absl::StrCat(", test accuracy ", result.test_accuracy) : "");
  if (std::optional<std::string> diverging = divergence_.CheckEpoch(p.epoch, result.mean_loss)) {
    spdlog::warn("{}", *diverging);
    if (summary.divergence.empty()) summary.divergence = *diverging;
    if (options_.stop_on_divergence) return absl::FailedPreconditionError(absl::StrCat(*diverging, " (--stop_on_divergence)"));
  }
  // An epoch run again after a rewind replaces its first result.
  auto same = std::find_if(summary.epochs.begin(), summary.epochs.end(),
                           [&](const EpochResult& e) { return e.epoch == p.epoch; });
  if (same != summary.epochs.end()) summary.epochs.erase(same, summary.epochs.end());
  summary.epochs.push_back(result);
  return absl::OkStatus();
}

TrainerProgress Trainer::Progress() const {
  absl::MutexLock lock(&progress_mu_);
  TrainerProgress p = progress_;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - run_start_);
  p.samples_per_second = seconds > 0 && run_start_ != absl::InfinitePast() ? p.samples / seconds : 0;
  return p;
}

void Trainer::Record(float loss, int correct, int64_t i, int64_t per_epoch, EpochProgress& p, TrainSummary& summary) {
  summary.losses.push_back(loss);
  ++summary.steps;
  {
    absl::MutexLock lock(&progress_mu_);
    const int64_t one_way = model_->layout().TotalBytes() / 4 * options_.wire_value_bytes;
    ++progress_.steps;
    progress_.samples += options_.batch_size;
    progress_.split = split_;
    progress_.bytes_pushed += one_way;
    progress_.bytes_pulled += one_way;
    progress_.rejoins = summary.rejoins;
  }
  p.loss += loss, p.right += correct, ++p.steps;
  p.window_loss += loss, p.window_right += correct, ++p.window_steps;
  if (options_.log_every > 0 && ((i + 1) % options_.log_every == 0 || i + 1 == per_epoch)) {
    LogProgress(p, i + 1, per_epoch);
    p.window_loss = p.window_right = p.window_steps = 0;
    p.window_start = absl::Now();
    p.split_before = split_;
  }
}

std::string SummaryJson(const TrainSummary& s, const std::string& config_json) {
  std::vector<std::string> epochs;
  for (const EpochResult& e : s.epochs) {
    epochs.push_back(absl::StrCat("{\"epoch\": ", e.epoch, ", \"seconds\": ", e.seconds, ", \"mean_loss\": ",
                                  e.mean_loss, ", \"train_accuracy\": ", e.train_accuracy,
                                  ", \"test_accuracy\": ", e.test_accuracy, "}"));
  }
  return absl::StrCat("{\n  \"config\": ", config_json, ",\n  \"final_test_accuracy\": ", s.final_test_accuracy,
                      ",\n  \"final_weights_fnv1a\": \"", absl::Hex(s.final_weights_fnv1a, absl::kZeroPad16), "\"",
                      ",\n  \"wall_seconds\": ", s.wall_seconds, ",\n  \"first_step\": ", s.first_step,
                      ",\n  \"rejoins\": ", s.rejoins, ",\n  \"steps_redone\": ", s.steps_redone,
                      ",\n  \"steps\": ", s.steps,
                      ",\n  \"samples\": ", s.samples, ",\n  \"samples_per_second\": ", s.samples_per_second,
                      ",\n  \"cpu_seconds\": ", s.cpu_seconds, ",\n  \"bytes_per_step\": ", s.bytes_per_step,
                      ",\n  \"divergence\": ", s.divergence.empty() ? "null" : absl::StrCat("\"", s.divergence, "\""),
                      ",\n  \"time_split_seconds\": {\"pull_wait\": ", s.split.pull_wait, ", \"compute\": ",
                      s.split.compute, ", \"push_wait\": ", s.split.push_wait, "},\n  \"epochs\": [\n    ",
                      absl::StrJoin(epochs, ",\n    "), "\n  ]\n}\n");
}

}  // namespace shardps
