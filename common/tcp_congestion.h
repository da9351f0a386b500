// The TCP congestion control of ShardPS's own connections. Both daemons set it
// on every TCP socket gRPC opens or accepts for them (setsockopt
// TCP_CONGESTION), so a job can pick the algorithm that suits many bulk flows
// sharing each host's link without changing the machine's default for
// anything else. Measured on the emulated cluster (README, "Scaling"): CUBIC
// beats BBR at 8 workers in every mode, so the default, "auto", is CUBIC
// wherever this process may set it.
//
// The same hook sets a server's sockets' queueing priority (SO_PRIORITY): by
// default TC_PRIO_BULK, so that where the host's queueing discipline honors
// priority (pfifo_fast, Debian's default, or prio) the server's answers wait
// behind the colocated worker's pushes and requests instead of sharing the
// host's uplink with them first come, first served (README, "Scaling"). The
// connections pushes arrive on go back to the machine's band at their first
// push (server/service_dispatcher.h), so acknowledgements are not bulk.
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

// SO_PRIORITY values: leave the machine's (0) alone; TC_PRIO_BULK, pfifo_fast's
// lowest band, the server's default.
inline constexpr int kKeepSocketPriority = -1;
inline constexpr int kMachineSocketPriority = 0;  // a socket's until set
inline constexpr int kBulkSocketPriority = 2;

// OK when `name` is "auto", "system" or an algorithm this process may set;
// else INVALID_ARGUMENT naming the algorithms it may set.
absl::Status CheckTcpCongestion(absl::string_view name);

// The algorithm `name` stands for here: "auto" becomes "cubic" or "system".
std::string ResolveTcpCongestion(absl::string_view name);

// Every TCP socket of channels made with `args` uses `name` ("system": no change).
void UseTcpCongestion(absl::string_view name, grpc::ChannelArguments* args);

// The same for a server's listening and accepted sockets, which also get
// SO_PRIORITY `priority` (kKeepSocketPriority: no change).
std::unique_ptr<grpc::ServerBuilderOption> TcpCongestionServerOption(absl::string_view name, int priority);

// OK when `priority` is kKeepSocketPriority or a value this process may set
// (0-6 unprivileged, more with CAP_NET_ADMIN); else INVALID_ARGUMENT.
absl::Status CheckSocketPriority(int priority);

// The machine's default algorithm and the ones its kernel has, space-separated
// (net.ipv4.tcp_congestion_control, tcp_available_congestion_control).
std::string MachineTcpCongestion();
std::string AvailableTcpCongestion();

// The algorithm of TCP socket `fd`; empty when it is not one.
std::string TcpCongestionOf(int fd);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TCP_CONGESTION_H_
