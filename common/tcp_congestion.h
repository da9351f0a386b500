// The TCP congestion control of ShardPS's own connections. Both daemons set it
// on every TCP socket gRPC opens or accepts for them (setsockopt
// TCP_CONGESTION), so a job can pick the algorithm that suits many bulk flows
// sharing each host's link without changing the machine's default for
// anything else. Measured on the emulated cluster (README, "Scaling"): CUBIC
// beats BBR at 8 workers in every mode, so the default, "auto", is CUBIC
// wherever this process may set it.
#ifndef SHARDPS_COMMON_TCP_CONGESTION_H_
#define SHARDPS_COMMON_TCP_CONGESTION_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace grpc {
class ChannelArguments;
class ServerBuilderOption;
}  // namespace grpc

namespace shardps {

// CUBIC when this process may set it, else the machine's default (a kernel
// built with another default may not offer CUBIC to unprivileged processes).
inline constexpr char kDefaultTcpCongestion[] = "auto";
// The value that keeps the machine's default (net.ipv4.tcp_congestion_control).
inline constexpr char kSystemTcpCongestion[] = "system";

// OK when `name` is "auto", "system" or an algorithm this process may set;
// else INVALID_ARGUMENT naming the algorithms it may set.
absl::Status CheckTcpCongestion(absl::string_view name);

// The algorithm `name` stands for here: "auto" becomes "cubic" or "system".
std::string ResolveTcpCongestion(absl::string_view name);

// Every TCP socket of channels made with `args` uses `name` ("system": no change).
void UseTcpCongestion(absl::string_view name, grpc::ChannelArguments* args);

// The same for a server's listening and accepted sockets.
std::unique_ptr<grpc::ServerBuilderOption> TcpCongestionServerOption(absl::string_view name);

// The machine's default algorithm and the ones its kernel has, space-separated
// (net.ipv4.tcp_congestion_control, tcp_available_congestion_control).
std::string MachineTcpCongestion();
std::string AvailableTcpCongestion();

// The algorithm of TCP socket `fd`; empty when it is not one.
std::string TcpCongestionOf(int fd);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TCP_CONGESTION_H_
