// tcp_proxy: a TCP forwarder whose link can be cut, for the chaos suite.
//
//   tcp_proxy --target=127.0.0.1:7000 [--listen_port=0] [--cut=2s] [--delay=0]
//
// Prints "LISTENING port=N" once it accepts connections on 127.0.0.1:N and
// forwards each one to the target. On SIGUSR1 it cuts the link: every
// forwarded connection is reset, and new connections are refused for --cut;
// then it accepts again on the same port. SIGTERM or SIGINT: exit 0.
// --delay holds every chunk read that long before forwarding it: a slow
// link, one way, for handshakes (chunks wait in turn, so bulk throughput
// falls with it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, target, "", "host:port to forward to (an IPv4 address).");
ABSL_FLAG(int, listen_port, 0, "Port on 127.0.0.1 to accept on; 0 picks one (printed).");
ABSL_FLAG(absl::Duration, cut, absl::Seconds(2), "How long a cut (SIGUSR1) refuses new connections.");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(), "How long each chunk is held before it is forwarded.");

namespace {

sockaddr_in Address(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  return addr;
}

// One forwarded connection: both sockets, closed by the last pump to end.
struct Link {
  int client = -1, upstream = -1;
  std::atomic<int> pumps_left{2};
  void Reset() {
    const linger hard{1, 0};  // close with RST
    for (int fd : {client, upstream}) {
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      shutdown(fd, SHUT_RDWR);
    }
  }
};

class Proxy {
 public:
  Proxy(sockaddr_in target, int port, absl::Duration delay) : target_(target), port_(port), delay_(delay) {}

  // Listens on 127.0.0.1:port_ (port_ 0: picks one); false on failure.
  bool Listen() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr = Address("127.0.0.1", port_);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener_, 64) != 0) {
      perror("tcp_proxy: bind/listen");
      return false;
    }
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this, fd = listener_] { Accept(fd); });
    return true;
  }
  int port() const { return port_; }

  // Resets every link and refuses connections for `pause`.
  void Cut(absl::Duration pause) {
    shutdown(listener_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    close(listener_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& link : links_) link->Reset();
      links_.clear();
    }
    fprintf(stderr, "tcp_proxy: link cut for %s\n", absl::FormatDuration(pause).c_str());
    absl::SleepFor(pause);
    if (Listen()) fprintf(stderr, "tcp_proxy: link restored on port %d\n", port_);
  }

 private:
  void Accept(int listener) {
    for (;;) {
      const int client = accept(listener, nullptr, nullptr);
      if (client < 0) return;
      const int upstream = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(upstream, reinterpret_cast<const sockaddr*>(&target_), sizeof(target_)) != 0) {
        close(client);
        close(upstream);
        continue;
      }
      const int one = 1;  // forward small messages at once, as gRPC's own sockets do
      setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto link = std::make_shared<Link>();
      link->client = client;
      link->upstream = upstream;
      {
        std::lock_guard<std::mutex> lock(mu_);
        links_.push_back(link);
      }
      std::thread([link, d = delay_] { Pump(link, link->client, link->upstream, d); }).detach();
      std::thread([link, d = delay_] { Pump(link, link->upstream, link->client, d); }).detach();
    }
  }

  static void Pump(std::shared_ptr<Link> link, int from, int to, absl::Duration delay) {
    char buffer[1 << 16];
    for (ssize_t n; (n = read(from, buffer, sizeof(buffer))) > 0;) {
      if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = write(to, buffer + sent, n - sent);
        if (w <= 0) break;
        sent += w;
      }
    }
    shutdown(to, SHUT_WR);
    if (link->pumps_left.fetch_sub(1) == 1) {
      close(link->client);
      close(link->upstream);
    }
  }

  const sockaddr_in target_;
  int port_;
  const absl::Duration delay_;
  int listener_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Link>> links_;
};

}  // namespace

int main(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::ParseCommandLine(argc, argv);
  std::vector<std::string> target = absl::StrSplit(absl::GetFlag(FLAGS_target), ':');
  int target_port = 0;
  if (target.size() != 2 || !absl::SimpleAtoi(target[1], &target_port)) {
    fprintf(stderr, "tcp_proxy: --target must be host:port\n");
    return 2;
  }
  Proxy proxy(Address(target[0], target_port), absl::GetFlag(FLAGS_listen_port), absl::GetFlag(FLAGS_delay));
  if (!proxy.Listen()) return 1;
  printf("LISTENING port=%d\n", proxy.port());
  fflush(stdout);
  for (;;) {
    int number = 0;
    sigwait(&signals, &number);
    if (number != SIGUSR1) _exit(0);  // detached pumps: no orderly teardown is needed
    proxy.Cut(absl::GetFlag(FLAGS_cut));
  }
}
