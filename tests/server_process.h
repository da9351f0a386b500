// Child processes for multi-process tests: the real ps_server and ps_worker.
#ifndef SHARDPS_TESTS_SERVER_PROCESS_H_
#define SHARDPS_TESTS_SERVER_PROCESS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardps::testing {

// Path of a binary of this workspace inside the test's runfiles.
inline std::string RunfilePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return relative;
  return std::string(srcdir) + "/" + (workspace ? workspace : "shardps") + "/" + relative;
}

// In a forked child: replaces it with `binary args...`, or exits 127.
[[noreturn]] inline void ExecOrExit(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(binary.c_str(), argv.data());
  _exit(127);
}

class ServerProcess {
 public:
  // Starts `binary` with `args` and waits for its "LISTENING port=N" line.
  ServerProcess(const std::string& binary, const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      ExecOrExit(binary, args);
    }
    close(out[1]);
    FILE* in = fdopen(out[0], "r");
    char line[256];
    while (fgets(line, sizeof(line), in) != nullptr) {
      if (sscanf(line, "LISTENING port=%d metrics_port=%d", &port_, &metrics_port_) >= 1) break;
    }
    fclose(in);
    if (port_ == 0) throw std::runtime_error("ps_server did not start: " + binary);
  }
  ~ServerProcess() {
    if (pid_ > 0) Signal(SIGKILL);
  }

  int port() const { return port_; }
  // ps_server's metrics port (--metrics_port=0 picks one); -1 when off.
  int metrics_port() const { return metrics_port_; }
  // Sends `sig` and returns the exit status as waitpid reports it.
  int Signal(int sig) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = -1;
};

// Runs any binary with stdout and stderr to `log_path`.
class ChildProcess {
 public:
  ChildProcess(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* log = fopen(log_path.c_str(), "w");
      if (log != nullptr) {
        dup2(fileno(log), STDOUT_FILENO);
        dup2(fileno(log), STDERR_FILENO);
      }
      ExecOrExit(binary, args);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code, or -1 when it died by a signal.
  int Wait() {
    if (pid_ <= 0) return -1;  // reaped already (waitpid(-1) would take any child)
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // Sends `sig` without waiting.
  void Send(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // True when the process has ended; then `code` is as Wait() returns it.
  bool Ended(int* code) {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return true;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A port that was free a moment ago on every address (servers bind
// 0.0.0.0), and that no earlier call in this process returned. Servers of a
// test are started on ports picked first, so two calls must never agree:
// bind(port 0) hands out a port just closed again, and on 2026-11-27 two
// servers of one chaos job got the same one (the second could not listen,
// and the workers reached the first at both addresses). Ports come from
// below the kernel's ephemeral range, where no outgoing connection of a
// test (a worker's to a server, say) takes its local port from.
inline int FreePort() {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  int ephemeral_low = 32768;
  if (FILE* range = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (fscanf(range, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    fclose(range);
  }
  const int low = 10000, high = std::max(low + 1000, ephemeral_low);  // [low, high)
  std::lock_guard<std::mutex> lock(mu);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    const int port = low + static_cast<int>(random() % static_cast<unsigned>(high - low));
    if (given.count(port) > 0) continue;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (!free) continue;
    given.insert(port);
    return port;
  }
  throw std::runtime_error("FreePort: no free port found");
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_SERVER_PROCESS_H_
