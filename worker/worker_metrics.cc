#include "worker/worker_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

prometheus::ClientMetric Metric(prometheus::MetricType type, double value,
                                std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

class WorkerCollectable final : public prometheus::Collectable {
 public:
  WorkerCollectable(int rank, const Trainer* trainer, const PsClient* client)
      : rank_(absl::StrCat(rank)), trainer_(trainer), client_(client) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const TrainerProgress p = trainer_->Progress();
    const ClientStats c = client_->Stats();
    using T = prometheus::MetricType;
    auto one = [&](const std::string& name, const std::string& help, T type, double value) {
      return prometheus::MetricFamily{name, help, type, {Metric(type, value, {{"rank", rank_}})}};
    };
    prometheus::MetricFamily split{"shardps_worker_seconds_total",
                                   "Training time by where it went: pull_wait, compute, push_wait.",
                                   T::Counter,
                                   {}};
    for (const auto& [phase, seconds] : {std::pair{"pull_wait", p.split.pull_wait}, std::pair{"compute", p.split.compute},
                                         std::pair{"push_wait", p.split.push_wait}}) {
      split.metric.push_back(Metric(T::Counter, seconds, {{"rank", rank_}, {"phase", phase}}));
    }
    return {
        one("shardps_worker_step", "The job step this worker is at.", T::Gauge, p.step),
        one("shardps_worker_steps_total", "Steps this worker completed.", T::Counter, p.steps),
        one("shardps_worker_samples_total", "Training samples this worker processed.", T::Counter, p.samples),
        one("shardps_worker_samples_per_second", "Samples per second since training began.", T::Gauge,
            p.samples_per_second),
        split,
        one("shardps_worker_pushed_bytes_total", "Gradient bytes pushed (on the wire).", T::Counter, p.bytes_pushed),
        one("shardps_worker_pulled_bytes_total", "Weight bytes pulled (on the wire).", T::Counter, p.bytes_pulled),
        one("shardps_worker_retries_total", "Call attempts after the first (servers not answering).", T::Counter,
            c.retries),
        one("shardps_worker_registrations_total", "Registrations answered (joins and re-registrations).", T::Counter,
            c.registrations),
        one("shardps_worker_rewinds_total", "Rewinds this worker sent the job.", T::Counter, c.rewinds),
        one("shardps_worker_rejoins_total", "Times this worker lined up with the job again.", T::Counter, p.rejoins),
    };
  }

 private:
  const std::string rank_;
  const Trainer* const trainer_;
  const PsClient* const client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(const std::string& address, int rank,
                                                                    const Trainer* trainer, const PsClient* client) {
  auto collectable = std::make_shared<WorkerCollectable>(rank, trainer, client);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      address, [collectable] { return prometheus::TextSerializer().Serialize(collectable->Collect()); });
  if (!http.ok()) return http.status();
  std::unique_ptr<WorkerMetrics> endpoint(new WorkerMetrics());
  endpoint->http_ = *std::move(http);
  return endpoint;
}

WorkerMetrics::~WorkerMetrics() = default;

}  // namespace shardps
