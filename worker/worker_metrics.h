// Prometheus metrics of one worker on --metrics_port: steps, samples and
// samples/s, where the time went (pull wait, compute, push wait), bytes
// pushed and pulled, and the client's retries, registrations, rewinds and
// the trainer's rejoins. Read from the trainer and the client at each
// scrape, and served by common/metrics_http (not civetweb: see there why), as the server's are.
#ifndef SHARDPS_WORKER_WORKER_METRICS_H_
#define SHARDPS_WORKER_WORKER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_http.h"
#include "client/ps_client.h"
#include "worker/trainer.h"

namespace shardps {

class WorkerMetrics {
 public:
  // Serves /metrics on `address` ("0.0.0.0:9200"; port 0 picks one).
  // `trainer` and `client` must outlive the endpoint. UNAVAILABLE when the
  // port cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(const std::string& address, int rank,
                                                              const Trainer* trainer, const PsClient* client);
  ~WorkerMetrics();
  int port() const { return http_->port(); }

 private:
  WorkerMetrics() = default;
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_WORKER_METRICS_H_
