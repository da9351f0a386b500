#include "server/ps_server_host.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/bulk_channel_args.h"
#include "spdlog/spdlog.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<PsServerHost>> PsServerHost::Start(const HostOptions& options,
                                                                  std::unique_ptr<ParameterServer> core) {
  std::unique_ptr<PsServerHost> host(new PsServerHost());
  host->core_ = std::move(core);
  host->service_ = std::make_unique<PsService>(host->core_.get());
  host->raw_service_ = std::make_unique<RawTensorService>(host->core_.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.address, ":", options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &host->port_);
  builder.RegisterService(host->service_.get());
  builder.RegisterCallbackGenericService(host->raw_service_.get());
  for (const auto& [name, value] : BulkChannelArgs()) builder.AddChannelArgument(name, value);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  host->server_ = builder.BuildAndStart();
  if (host->server_ == nullptr || host->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (options.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> metrics =
        MetricsEndpoint::Start(absl::StrCat(options.address, ":", options.metrics_port), host->core_.get());
    if (!metrics.ok()) {
      host->server_->Shutdown();
      return metrics.status();
    }
    host->metrics_ = *std::move(metrics);
  }
  host->housekeeper_ = std::thread([h = host.get(), interval = options.tick_interval] { h->Housekeep(interval); });
  spdlog::info("server {} serving {} mode on port {} (metrics port {})", host->core_->server_id(),
               ModeName(host->core_->mode()), host->port_, host->metrics_port());
  return host;
}

void PsServerHost::Housekeep(absl::Duration interval) {
  while (!stop_.WaitForNotificationWithTimeout(interval)) core_->Tick();
}

void PsServerHost::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_.Notify();
  if (housekeeper_.joinable()) housekeeper_.join();
  core_->Shutdown();  // fails waiting pulls so their calls can finish.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
  metrics_.reset();
  spdlog::info("server {} stopped", core_->server_id());
}

PsServerHost::~PsServerHost() { Shutdown(); }

}  // namespace shardps
