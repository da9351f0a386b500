#include "server/ps_server_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/bulk_channel_args.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

// Why `address`:`port` cannot be bound, as the OS says it (gRPC only logs
// it): tries an IPv4 bind itself. Empty when the bind works.
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

absl::Status CannotListen(const std::string& address, int port) {
  const std::string why = BindFailure(address, port);
  return absl::UnavailableError(absl::StrCat("cannot listen on address ", address, " port ", port, ": ",
                                             why.empty() ? "gRPC refused the address" : why));
}

// A plaintext server with nothing but the default health service (enabled
// process-wide before the main server is built); `port` receives the bound
// port. `unimplemented` answers every other method UNIMPLEMENTED (gRPC
// needs a callback service to poll the health service's calls).
std::unique_ptr<grpc::Server> StartHealthServer(const std::string& address, int requested, int* port,
                                                grpc::CallbackGenericService* unimplemented) {
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(unimplemented);
  builder.AddListeningPort(absl::StrCat(address, ":", requested), grpc::InsecureServerCredentials(), port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  return builder.BuildAndStart();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsServerHost>> PsServerHost::Start(const HostOptions& options,
                                                                  std::unique_ptr<ParameterServer> core,
                                                                  Clock* clock) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<PsServerHost> host(new PsServerHost());
  host->core_ = std::move(core);
  host->clock_ = clock;
  host->dispatcher_ = std::make_unique<ServiceDispatcher>(host->core_.get(), options.auth_token, options.on_admin_stop);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.address, ":", options.port);
  builder.AddListeningPort(address, *credentials, &host->port_);
  builder.RegisterCallbackGenericService(host->dispatcher_.get());
  for (const auto& [name, value] : BulkChannelArgs()) builder.AddChannelArgument(name, value);
  // Two servers on one port would split the workers' connections between
  // them: a busy port is an error, not shared.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  host->server_ = builder.BuildAndStart();
  if (host->server_ == nullptr || host->port_ == 0) return CannotListen(options.address, options.port);
  if (options.health_port >= 0) {
    int bound = 0;
    host->health_server_ = StartHealthServer(options.address, options.health_port, &bound,
                                                &host->health_unimplemented_);
    if (host->health_server_ == nullptr || bound == 0) return CannotListen(options.address, options.health_port);
    host->health_port_ = bound;
  }
  if (options.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics =
        MetricsEndpoint::Start(absl::StrCat(options.address, ":", options.metrics_port), host->core_.get());
    if (!metrics.ok()) return metrics.status();
    host->metrics_ = *std::move(metrics);
  }
  host->housekeeper_ = std::thread([h = host.get(), interval = options.tick_interval] { h->Housekeep(interval); });
  spdlog::info("server {} serving {} mode on port {} (metrics port {}, health port {}), incarnation {:016x}; {}{}",
               host->core_->server_id(), ModeName(host->core_->mode()), host->port_, host->metrics_port(),
               host->health_port_,
               host->core_->incarnation(),
               options.tls.cert.empty() ? "plaintext" : (options.tls.mutual ? "mutual TLS" : "TLS"),
               options.auth_token.empty() ? ", no job token" : ", job token required");
  return host;
}

void PsServerHost::Housekeep(absl::Duration interval) {
  stop_.RunEvery(*clock_, interval, [this] { core_->Tick(); });
}

void PsServerHost::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_.Stop();
  if (housekeeper_.joinable()) housekeeper_.join();
  if (health_server_ != nullptr) {
    // Probes see NOT_SERVING while the final checkpoint is written.
    health_server_->GetHealthCheckService()->SetServingStatus(false);
  }
  core_->Shutdown();  // fails waiting pulls so their calls can finish.
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    health_server_->Wait();
  }
  metrics_.reset();
  spdlog::info("server {} stopped", core_->server_id());
}

PsServerHost::~PsServerHost() { Shutdown(); }

}  // namespace shardps
