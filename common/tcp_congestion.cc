#include "common/tcp_congestion.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <grpc/grpc.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "common/connection_priority.h"
#include "spdlog/spdlog.h"

// gRPC's socket mutator, the one hook it offers for options on the sockets it
// makes. The public headers name it but define it only in gRPC's own source
// (src/core/lib/iomgr/socket_mutator.h); this is that definition for the gRPC
// of Debian 12 (1.51), whose C++-linked functions these declarations match.
// tcp_congestion_test checks on real sockets that the mutator is applied.
enum grpc_fd_usage { kClientConnection, kServerListener, kServerConnection };
struct grpc_mutate_socket_info {
  int fd;
  grpc_fd_usage usage;
};
struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};
struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};
void grpc_socket_mutator_init(grpc_socket_mutator* mutator, const grpc_socket_mutator_vtable* vtable);

namespace shardps {
namespace {

bool IsTcp(int fd) {
  int protocol = 0;
  socklen_t len = sizeof(protocol);
  return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0 && protocol == IPPROTO_TCP;
}

int SetAlgorithm(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size()));
}

struct CongestionMutator {
  grpc_socket_mutator base;  // first, so a grpc_socket_mutator* is a CongestionMutator*
  std::string name;          // empty: the machine's algorithm
  int priority;              // kKeepSocketPriority: the machine's
};

CongestionMutator* Of(grpc_socket_mutator* m) { return reinterpret_cast<CongestionMutator*>(m); }

// Both are checked at start-up, so a failure here is unexpected; the
// connection still works, so it is logged once and not refused.
void WarnOnce(const std::string& what) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) spdlog::warn("{} not set on a connection: {}", what, std::strerror(errno));
}

bool MutateFd(int fd, grpc_socket_mutator* m) {
  if (!IsTcp(fd)) return true;  // a Unix socket has no congestion control
  const CongestionMutator& settings = *Of(m);
  if (!settings.name.empty() && SetAlgorithm(fd, settings.name) != 0) {
    WarnOnce(absl::StrCat("TCP congestion control '", settings.name, "'"));
  }
  if (settings.priority != kKeepSocketPriority && !SetSocketPriority(fd, settings.priority)) {
    WarnOnce(absl::StrCat("socket priority ", settings.priority));
  }
  return true;
}

bool MutateFd2(const grpc_mutate_socket_info* info, grpc_socket_mutator* m) { return MutateFd(info->fd, m); }

int Compare(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  if (Of(a)->priority != Of(b)->priority) return Of(a)->priority < Of(b)->priority ? -1 : 1;
  return Of(a)->name.compare(Of(b)->name);
}

void Destroy(grpc_socket_mutator* m) { delete Of(m); }

const grpc_socket_mutator_vtable kVtable = {MutateFd, Compare, Destroy, MutateFd2};

std::string ReadLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Every TCP socket of channels made with `args` gets algorithm `name`
// ("system": no change) and SO_PRIORITY `priority`.
void UseSocketSettings(absl::string_view name, int priority, grpc::ChannelArguments* args) {
  std::string algorithm = ResolveTcpCongestion(name);
  if (algorithm == kSystemTcpCongestion) algorithm.clear();
  if (algorithm.empty() && priority == kKeepSocketPriority) return;
  auto* mutator = new CongestionMutator{{}, algorithm, priority};
  grpc_socket_mutator_init(&mutator->base, &kVtable);
  args->SetSocketMutator(&mutator->base);  // takes the reference
}

class TcpCongestionOption : public grpc::ServerBuilderOption {
 public:
  TcpCongestionOption(absl::string_view name, int priority) : name_(name), priority_(priority) {}
  void UpdateArguments(grpc::ChannelArguments* args) override { UseSocketSettings(name_, priority_, args); }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  std::string name_;
  int priority_;
};

}  // namespace

absl::Status CheckTcpCongestion(absl::string_view name) {
  if (name == kSystemTcpCongestion || name == kDefaultTcpCongestion) return absl::OkStatus();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  const bool ok = !name.empty() && SetAlgorithm(fd, std::string(name)) == 0;
  const int error = errno;
  close(fd);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--tcp_congestion='", name, "' cannot be set here (", name.empty() ? "empty" : std::strerror(error),
      "); this process may set: ", ReadLine("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
      " (the kernel has: ", AvailableTcpCongestion(), "), or '", kSystemTcpCongestion,
      "' to keep the machine's default (", MachineTcpCongestion(), ")"));
}

std::string MachineTcpCongestion() { return ReadLine("/proc/sys/net/ipv4/tcp_congestion_control"); }

std::string AvailableTcpCongestion() { return ReadLine("/proc/sys/net/ipv4/tcp_available_congestion_control"); }

std::string ResolveTcpCongestion(absl::string_view name) {
  if (name != kDefaultTcpCongestion) return std::string(name);
  static const bool cubic = CheckTcpCongestion("cubic").ok();
  return cubic ? "cubic" : kSystemTcpCongestion;
}

void UseTcpCongestion(absl::string_view name, grpc::ChannelArguments* args) {
  UseSocketSettings(name, kKeepSocketPriority, args);
}

std::unique_ptr<grpc::ServerBuilderOption> TcpCongestionServerOption(absl::string_view name, int priority) {
  return std::make_unique<TcpCongestionOption>(name, priority);
}

absl::Status CheckSocketPriority(int priority) {
  if (priority == kKeepSocketPriority) return absl::OkStatus();
  const int fd = priority < 0 ? -1 : socket(AF_INET, SOCK_STREAM, 0);
  const bool ok = fd >= 0 && SetSocketPriority(fd, priority);
  const int error = errno;
  if (fd >= 0) close(fd);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--socket_priority=", priority, " cannot be set here (",
      priority < 0 ? "negative" : std::strerror(error), "); use 0-6 (", kBulkSocketPriority,
      ": bulk, pfifo_fast's lowest band; 0: the machine's default), more only with CAP_NET_ADMIN, or ",
      kKeepSocketPriority, " to leave the sockets alone"));
}

std::string TcpCongestionOf(int fd) {
  if (!IsTcp(fd)) return "";
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, strnlen(name, len));
}

}  // namespace shardps
