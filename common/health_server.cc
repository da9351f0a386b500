#include "common/health_server.h"

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/listen_error.h"

namespace shardps {
absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& address, int port) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthServer> health(new HealthServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(address, ":", port), grpc::InsecureServerCredentials(), &health->port_);
  // gRPC polls the health service's calls only beside a callback service.
  builder.RegisterCallbackGenericService(&health->unimplemented_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  health->server_ = builder.BuildAndStart();
  if (health->server_ == nullptr || health->port_ == 0) return CannotListen(address, port);
  return health;
}

void HealthServer::SetNotServing() { server_->GetHealthCheckService()->SetServingStatus(false); }

HealthServer::~HealthServer() {
  if (server_ == nullptr) return;  // never started (the port was taken)
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace shardps
