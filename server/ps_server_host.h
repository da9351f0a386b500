// Hosts a ParameterServer on a port: the gRPC server with every ShardPS
// method (server/service_dispatcher.h) and the health service, the
// housekeeping thread that calls Tick() on the injected clock, the metrics
// endpoint, and optionally a plaintext port serving only the gRPC health
// service (for probes that cannot speak TLS, such as Kubernetes' gRPC probes). Used by ps_server's main() and by service tests.
//
// Start() then Shutdown(); thread-safe.
#ifndef SHARDPS_SERVER_PS_SERVER_HOST_H_
#define SHARDPS_SERVER_PS_SERVER_HOST_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/health_server.h"
#include "common/security.h"
#include "common/tcp_congestion.h"
#include "common/trace.h"
#include "server/parameter_server.h"
#include "server/server_metrics.h"
#include "server/service_dispatcher.h"

namespace shardps {

struct HostOptions {
  std::string address = "0.0.0.0";
  int port = 0;                       // 0 picks a free port.
  int metrics_port = -1;              // -1: no metrics endpoint; 0 picks one.
  int health_port = -1;               // -1: no plaintext health port; 0 picks one.
  int64_t max_message_bytes = 256 << 20;  // both directions.
  absl::Duration tick_interval = absl::Milliseconds(20);  // on the host's clock
  TlsFiles tls;            // no cert and key: plaintext
  std::string auth_token;  // empty: calls need no token
  std::function<void()> on_admin_stop;  // ADMIN_STOP asks for this (empty: refused)
  Trace* trace = nullptr;  // records pushes arriving and pulls answered; borrowed
  // gRPC's bandwidth-delay probe on the connections it accepts
  // (common/bulk_channel_args.h).
  bool http2_bdp_probe = true;
  // TCP congestion control of the connections it accepts (common/tcp_congestion.h).
  std::string tcp_congestion = kDefaultTcpCongestion;
  // SO_PRIORITY of the connections it accepts: bulk by default, so its
  // answers yield to the colocated worker's traffic on the host's uplink.
  int socket_priority = kBulkSocketPriority;
};

class PsServerHost {
 public:
  // Takes ownership of `core`; `clock` (the core's) must outlive the host.
  // UNAVAILABLE naming the address, the port and the reason when the port
  // cannot be bound (in use, not permitted, no such address);
  // FAILED_PRECONDITION or INVALID_ARGUMENT for unusable TLS files.
  static absl::StatusOr<std::unique_ptr<PsServerHost>> Start(const HostOptions& options,
                                                             std::unique_ptr<ParameterServer> core, Clock* clock);
  ~PsServerHost();
  PsServerHost(const PsServerHost&) = delete;
  PsServerHost& operator=(const PsServerHost&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : -1; }
  int health_port() const { return health_ ? health_->port() : -1; }
  ParameterServer* core() { return core_.get(); }

  // Stops accepting calls, fails waiting pulls, waits up to `grace` for
  // calls in flight, writes a final checkpoint if configured. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  PsServerHost() = default;
  void Housekeep(absl::Time start, absl::Duration interval);  // Tick()s due from `start` on

  std::unique_ptr<ParameterServer> core_;
  Clock* clock_ = nullptr;
  std::unique_ptr<ServiceDispatcher> dispatcher_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthServer> health_;  // plaintext, health service only
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::thread housekeeper_;
  StopFlag stop_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVER_HOST_H_
