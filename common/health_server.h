// A plaintext gRPC server with nothing but the standard health service
// (grpc.health.v1.Health), for probes that cannot speak TLS or carry the job
// token, such as Kubernetes' gRPC probes. Every other method is
// UNIMPLEMENTED. ps_server and ps_worker start one on --health_port.
#ifndef SHARDPS_COMMON_HEALTH_SERVER_H_
#define SHARDPS_COMMON_HEALTH_SERVER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shardps {

class HealthServer {
 public:
  // Listens on `address`:`port` (port 0 picks one), answering SERVING.
  // UNAVAILABLE naming the address, the port and the OS's reason when the
  // port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const std::string& address, int port);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  int port() const { return port_; }
  // Probes see NOT_SERVING from now on (a daemon that is stopping).
  void SetNotServing();

 private:
  HealthServer() = default;

  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_HEALTH_SERVER_H_
