#include "server/server_metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/malloc_tuning.h"

namespace shardps {
namespace {

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type, double value, const std::string& server) {
  prometheus::ClientMetric metric;
  metric.label.push_back({"server", server});
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return prometheus::MetricFamily{name, help, type, {metric}};
}

// One histogram of push staleness (tensor empty: the server's).
prometheus::ClientMetric StalenessMetric(const StalenessHistogram::Counts& c, const std::string& server,
                                         const std::string& tensor) {
  prometheus::ClientMetric metric;
  metric.label.push_back({"server", server});
  if (!tensor.empty()) metric.label.push_back({"tensor", tensor});
  metric.histogram.sample_count = static_cast<uint64_t>(c.count);
  metric.histogram.sample_sum = static_cast<double>(c.sum);
  uint64_t cumulative = 0;
  for (size_t b = 0; b < c.per_bucket.size(); ++b) {
    cumulative += static_cast<uint64_t>(c.per_bucket[b]);
    const double bound = b < StalenessHistogram::kBounds.size() ? static_cast<double>(StalenessHistogram::kBounds[b])
                                                                 : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back({cumulative, bound});
  }
  return metric;
}

// The staleness of async and ssp pushes as Prometheus histograms: the
// server's, and one per tensor (a key range).
std::vector<prometheus::MetricFamily> StalenessFamilies(const ServerStats& s, const std::string& server) {
  prometheus::MetricFamily by_tensor{"shardps_push_staleness_by_tensor",
                                     "shardps_push_staleness for the keys of one tensor.",
                                     prometheus::MetricType::Histogram,
                                     {}};
  for (const auto& [tensor, counts] : s.staleness_by_tensor) {
    by_tensor.metric.push_back(StalenessMetric(counts, server, tensor));
  }
  return {prometheus::MetricFamily{"shardps_push_staleness",
                                   "Async and ssp pushes by staleness: updates of the key applied since the "
                                   "version the push was computed from.",
                                   prometheus::MetricType::Histogram,
                                   {StalenessMetric(s.staleness, server, "")}},
          std::move(by_tensor)};
}

// Sparse tables: one metric per table in each family.
std::vector<prometheus::MetricFamily> TableFamilies(const ServerStats& s, const std::string& server) {
  using T = prometheus::MetricType;
  struct Gauge {
    const char* name;
    const char* help;
    T type;
    int64_t SparseTableStats::*field;
  };
  static constexpr Gauge kGauges[] = {
      {"shardps_table_rows", "Rows of a sparse table held by this server.", T::Gauge, &SparseTableStats::rows},
      {"shardps_table_bytes", "Bytes of a sparse table's rows, slots and index on this server.", T::Gauge,
       &SparseTableStats::bytes},
      {"shardps_table_rows_created_total", "Rows created on first touch.", T::Counter, &SparseTableStats::rows_created},
      {"shardps_table_rows_evicted_total", "Rows dropped after --row_ttl_steps untouched.", T::Counter,
       &SparseTableStats::rows_evicted},
      {"shardps_table_ids_waiting", "Ids pushed but not yet stored (--row_admit_count).", T::Gauge,
       &SparseTableStats::ids_waiting},
      {"shardps_table_rows_pushed_total", "Row gradients accepted.", T::Counter, &SparseTableStats::rows_pushed},
      {"shardps_table_rows_pulled_total", "Rows sent.", T::Counter, &SparseTableStats::rows_pulled},
  };
  std::vector<prometheus::MetricFamily> out;
  for (const Gauge& g : kGauges) {
    prometheus::MetricFamily f{g.name, g.help, g.type, {}};
    for (const SparseTableStats& t : s.tables) {
      prometheus::ClientMetric m;
      m.label = {{"server", server}, {"table", t.name}};
      (g.type == T::Counter ? m.counter.value : m.gauge.value) = static_cast<double>(t.*g.field);
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  prometheus::MetricFamily sizes{"shardps_table_pull_rows", "Row pulls by the number of ids they name.",
                                 T::Histogram, {}};
  for (const SparseTableStats& t : s.tables) {
    prometheus::ClientMetric m;
    m.label = {{"server", server}, {"table", t.name}};
    uint64_t cumulative = 0;
    double bound = 4;  // bucket b holds sizes below 4^(b+1)
    for (size_t b = 0; b < t.pull_size_buckets.size(); ++b, bound *= 4) {
      cumulative += static_cast<uint64_t>(t.pull_size_buckets[b]);
      const bool last = b + 1 == t.pull_size_buckets.size();
      m.histogram.bucket.push_back({cumulative, last ? std::numeric_limits<double>::infinity() : bound - 1});
    }
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = static_cast<double>(t.rows_pulled);
    sizes.metric.push_back(std::move(m));
  }
  out.push_back(std::move(sizes));
  return out;
}

class StatsCollectable final : public prometheus::Collectable {
 public:
  explicit StatsCollectable(ParameterServer* core) : core_(core) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const ServerStats s = core_->Stats();
    const std::string id = absl::StrCat(core_->server_id());
    using T = prometheus::MetricType;
    std::vector<prometheus::MetricFamily> families = {
        Family("shardps_pushes_total", "Push requests served.", T::Counter, s.pushes, id),
        Family("shardps_pulls_total", "Pull requests answered.", T::Counter, s.pulls, id),
        Family("shardps_waiting_pulls", "Dense pulls held now until their version is ready (sync: workers at the barrier); rows not counted.",
               T::Gauge, static_cast<double>(s.waiting_pulls), id),
        Family("shardps_pushed_bytes_total", "Gradient bytes accepted.", T::Counter, s.bytes_pushed, id),
        Family("shardps_pulled_bytes_total", "Weight bytes sent.", T::Counter, s.bytes_pulled, id),
        Family("shardps_refused_total", "Requests answered with an error.", T::Counter, s.refused, id),
        Family("shardps_unauthenticated_total", "Calls refused for lack of the job token.", T::Counter,
               s.unauthenticated, id),
        Family("shardps_apply_seconds_total", "Time spent applying the optimizer.", T::Counter, s.apply_seconds, id),
        Family("shardps_step", "Smallest key version (sync: the step reached).", T::Gauge, s.min_version, id),
        Family("shardps_live_workers", "Workers counted as live.", T::Gauge, s.live_workers, id),
        Family("shardps_dead_workers_total", "Workers declared dead.", T::Counter, s.dead_workers_total, id),
        Family("shardps_short_steps_total", "Sync key steps completed without a dead worker.", T::Counter,
               s.steps_completed_short, id),
        Family("shardps_checkpoint_step", "Step of the last checkpoint; -1 if none.", T::Gauge, s.checkpoint_step, id),
        Family("shardps_timeline", "Rewinds of the job this server took part in.", T::Gauge, s.timeline, id),
        Family("shardps_rewinds_total", "Rewinds this server applied since it started.", T::Counter, s.rewinds, id),
        Family("shardps_steps_lost_total", "Steps those rewinds went back.", T::Counter, s.steps_lost_total, id),
        Family("shardps_awaiting_rewind", "1 while a restored server waits for the job to rewind.", T::Gauge,
               s.awaiting_rewind ? 1 : 0, id),
        Family("shardps_heartbeats_total", "Heartbeats answered.", T::Counter, s.heartbeats, id),
        Family("shardps_under_replicated_keys",
               "Keys this server serves with fewer copies than --replicas (their next copy failed, or is joining and not yet filled).", T::Gauge,
               static_cast<double>(s.under_replicated_keys), id),
        Family("shardps_keys_awaiting_copy",
               "Keys this server serves whose newest version their next copy has not acknowledged yet (0 once "
               "replication has caught up; pulls read or wait for the acknowledged one).",
               T::Gauge, static_cast<double>(s.keys_awaiting_copy), id),
        Family("shardps_replica_keys_sent_total", "Updated keys forwarded to their next copy.", T::Counter,
               static_cast<double>(s.replica_keys_sent), id),
        Family("shardps_replica_bytes_sent_total", "Bytes of weights and slots forwarded to next copies.",
               T::Counter, static_cast<double>(s.replica_bytes_sent), id),
        Family("shardps_replica_keys_installed_total", "Keys installed from a primary's updates.", T::Counter,
               static_cast<double>(s.replica_keys_installed), id),
        Family("shardps_replica_updates_superseded_total",
               "Key updates not forwarded because a newer one of the key went in the same call (a link behind).",
               T::Counter, static_cast<double>(s.replica_updates_superseded), id),
        Family("shardps_push_acks_held_total",
               "Pushes whose answer waited for the backup to include the worker's older pushes (--replicas > 1).",
               T::Counter, static_cast<double>(s.push_acks_held), id),
        Family("shardps_failed_servers", "Servers this one knows to have failed (--replicas).", T::Gauge,
               static_cast<double>(s.view.Count(Standing::kFailed)), id),
        Family("shardps_joining_servers", "Servers this one knows to be joining: being copied their keys (--join).",
               T::Gauge, static_cast<double>(s.view.Count(Standing::kJoining)), id),
        Family("shardps_keys_to_copy", "While this server joins (--join): the keys not yet copied to it.", T::Gauge,
               static_cast<double>(s.keys_to_copy), id),
        Family("shardps_heap_bytes", "Bytes malloc has handed out and not had back (memory in use).", T::Gauge,
               static_cast<double>(HeapBytesInUse()), id),
    };
    for (prometheus::MetricFamily& f : StalenessFamilies(s, id)) families.push_back(std::move(f));
    for (prometheus::MetricFamily& f : TableFamilies(s, id)) families.push_back(std::move(f));
    return families;
  }

 private:
  ParameterServer* const core_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        ParameterServer* core) {
  auto collectable = std::make_shared<StatsCollectable>(core);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      address, [collectable] { return prometheus::TextSerializer().Serialize(collectable->Collect()); });
  if (!http.ok()) return http.status();
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->http_ = *std::move(http);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace shardps
