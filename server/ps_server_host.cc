#include "server/ps_server_host.h"

#include <grpc/grpc.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/bulk_channel_args.h"
#include "common/listen_error.h"
#include "common/tcp_congestion.h"
#include "spdlog/spdlog.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<PsServerHost>> PsServerHost::Start(const HostOptions& options,
                                                                  std::unique_ptr<ParameterServer> core,
                                                                  Clock* clock) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  if (absl::Status s = CheckTcpCongestion(options.tcp_congestion); !s.ok()) return s;
  if (absl::Status s = CheckSocketPriority(options.socket_priority); !s.ok()) return s;
  std::unique_ptr<PsServerHost> host(new PsServerHost());
  host->core_ = std::move(core);
  host->clock_ = clock;
  // Connections start at socket_priority (bulk); those that carry pushes go
  // back to the machine's default band at their first push, so the pushes'
  // acknowledgements do not wait behind this server's answers.
  const int push_priority = options.socket_priority == kKeepSocketPriority ? kKeepSocketPriority : kMachineSocketPriority;
  host->dispatcher_ = std::make_unique<ServiceDispatcher>(host->core_.get(), options.auth_token, options.on_admin_stop,
                                                          options.trace, push_priority);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.address, ":", options.port);
  builder.AddListeningPort(address, *credentials, &host->port_);
  builder.RegisterCallbackGenericService(host->dispatcher_.get());
  for (const auto& [name, value] : BulkChannelArgs(options.http2_bdp_probe)) builder.AddChannelArgument(name, value);
  // Two servers on one port would split the workers' connections between
  // them: a busy port is an error, not shared.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetOption(TcpCongestionServerOption(options.tcp_congestion, options.socket_priority));
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  host->server_ = builder.BuildAndStart();
  if (host->server_ == nullptr || host->port_ == 0) return CannotListen(options.address, options.port);
  if (options.health_port >= 0) {
    absl::StatusOr<std::unique_ptr<HealthServer>> health = HealthServer::Start(options.address, options.health_port);
    if (!health.ok()) return health.status();
    host->health_ = *std::move(health);
  }
  if (options.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics =
        MetricsEndpoint::Start(absl::StrCat(options.address, ":", options.metrics_port), host->core_.get());
    if (!metrics.ok()) return metrics.status();
    host->metrics_ = *std::move(metrics);
  }
  host->housekeeper_ = std::thread([h = host.get(), start = host->clock_->Now(), interval = options.tick_interval] {
    h->Housekeep(start, interval);
  });
  spdlog::info("server {} serving {} mode on port {} (metrics port {}, health port {}), incarnation {:016x}; {}{}; "
               "TCP congestion control {}, socket priority {}",
               host->core_->server_id(), ModeName(host->core_->mode()), host->port_, host->metrics_port(),
               host->health_port(),
               host->core_->incarnation(),
               options.tls.cert.empty() ? "plaintext" : (options.tls.mutual ? "mutual TLS" : "TLS"),
               options.auth_token.empty() ? ", no job token" : ", job token required",
               ResolveTcpCongestion(options.tcp_congestion),
               options.socket_priority == kKeepSocketPriority ? std::string("the machine's")
                                                              : std::to_string(options.socket_priority));
  return host;
}

void PsServerHost::Housekeep(absl::Time start, absl::Duration interval) {
  stop_.RunEvery(*clock_, start, interval, [this] { core_->Tick(); });
}

void PsServerHost::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_.Stop();
  if (housekeeper_.joinable()) housekeeper_.join();
  if (health_ != nullptr) health_->SetNotServing();  // while the final checkpoint is written
  core_->Shutdown();  // fails waiting pulls so their calls can finish.
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
  health_.reset();
  metrics_.reset();
  spdlog::info("server {} stopped", core_->server_id());
}

PsServerHost::~PsServerHost() { Shutdown(); }

}  // namespace shardps
