#include "common/health_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// The OS's reason an IPv4 bind of `address`:`port` fails; empty if it works.
std::string BindFailure(const std::string& address, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) return "not an IPv4 address";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::strerror(errno);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  std::string failure;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) failure = std::strerror(errno);
  close(fd);
  return failure;
}

}  // namespace

absl::Status CannotListen(const std::string& address, int port) {
  const std::string why = BindFailure(address, port);
  return absl::UnavailableError(absl::StrCat("cannot listen on address ", address, " port ", port, ": ",
                                             why.empty() ? "gRPC refused the address" : why));
}

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
