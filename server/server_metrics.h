// Prometheus metrics of one server, read from the core's Stats() at each
// scrape, so the core itself knows nothing of Prometheus.
#ifndef SHARDPS_SERVER_SERVER_METRICS_H_
#define SHARDPS_SERVER_SERVER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/parameter_server.h"

namespace prometheus {
class Exposer;
}

namespace shardps {

class MetricsEndpoint {
 public:
  // Serves /metrics on `address` ("0.0.0.0:9100"; port 0 picks one).
  // `core` must outlive the endpoint. UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                ParameterServer* core);
  ~MetricsEndpoint();
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<void> collectable_;
  int port_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVER_METRICS_H_
