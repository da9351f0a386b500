#include "common/listen_error.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace shardps
