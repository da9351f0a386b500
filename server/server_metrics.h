// Prometheus metrics of one server, read from the core's Stats() at each
// scrape, so the core itself knows nothing of Prometheus, and served by
// common/metrics_http.
#ifndef SHARDPS_SERVER_SERVER_METRICS_H_
#define SHARDPS_SERVER_SERVER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_http.h"
#include "server/parameter_server.h"

namespace shardps {

class MetricsEndpoint {
 public:
  // Serves /metrics on `address` ("0.0.0.0:9100"; port 0 picks one).
  // `core` must outlive the endpoint. UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                ParameterServer* core);
  ~MetricsEndpoint();
  int port() const { return http_->port(); }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVER_METRICS_H_
