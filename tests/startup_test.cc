// ps_server's start-up failures, on the real binary: a busy port, an
// unwritable checkpoint directory and a TCP congestion control the kernel
// cannot set end it non-zero with a message naming the
// cause; SIGTERM at any moment of start-up (a slow restore included) ends it
// with exit 0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/shard_checkpoint.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

// Runs ps_server with `flags` to its end; returns its exit code, and its log in *log.
int RunServer(const std::vector<std::string>& flags, const std::string& log_path, std::string* log) {
  ChildProcess server(RunfilePath("server/ps_server"), flags, log_path);
  const int code = server.Wait();
  *log = ReadFile(log_path);
  return code;
}

TEST_CASE("a busy port: exit 1 naming the address, the port and the reason", "[startup][process]") {
  const std::string dir = TempDir("busy");
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  std::string log;
  const int code = RunServer({"--bind_address=127.0.0.1", absl::StrCat("--port=", port)}, dir + "/a.log", &log);
  close(fd);
  INFO(log);
  REQUIRE(code == 1);
  REQUIRE_THAT(log, Catch::Contains(absl::StrCat("cannot listen on address 127.0.0.1 port ", port,
                                                 ": Address already in use")));

  // Another ps_server on the port: refused too, not sharing it.
  ServerProcess first(RunfilePath("server/ps_server"), {"--bind_address=127.0.0.1", "--port=0"});
  const int second = RunServer({"--bind_address=127.0.0.1", absl::StrCat("--port=", first.port())},
                               dir + "/b.log", &log);
  INFO(log);
  REQUIRE(second == 1);
  REQUIRE_THAT(log, Catch::Contains("Address already in use"));
}

TEST_CASE("an unwritable checkpoint directory: exit 1 naming it, before serving", "[startup][process]") {
  const std::string dir = TempDir("unwritable");
  std::string log;
  const int code = RunServer({"--port=0", "--checkpoint_dir=/proc/nope", "--checkpoint_every=1"}, dir + "/a.log", &log);
  INFO(log);
  REQUIRE(code == 1);
  REQUIRE_THAT(log, Catch::Contains("/proc/nope"));
  REQUIRE_THAT(log, !Catch::Contains("LISTENING"));
}

// True once `pid` runs ps_server and blocks SIGTERM: its main() has begun.
// The name matters: between fork and exec the child is a copy of this test,
// and a SIGTERM then meets the test's own handlers (Catch2's), not the
// server's.
bool BlocksSigterm(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  bool server = false;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "Name:")) server = absl::StrContains(line, "ps_server");
    unsigned long long mask = 0;
    if (sscanf(line.c_str(), "SigBlk: %llx", &mask) == 1) return server && ((mask >> (SIGTERM - 1)) & 1);
  }
  return false;
}

TEST_CASE("a TCP congestion control the kernel cannot set: exit 1 naming those it can", "[startup][process]") {
  const std::string dir = TempDir("congestion");
  std::string log;
  const int code = RunServer({"--port=0", "--tcp_congestion=no-such-cc"}, dir + "/a.log", &log);
  INFO(log);
  REQUIRE(code == 1);
  REQUIRE_THAT(log, Catch::Contains("--tcp_congestion='no-such-cc' cannot be set here"));
  REQUIRE_THAT(log, Catch::Contains("reno"));
}

TEST_CASE("a socket priority that cannot be set: exit 1 saying what can", "[startup][process]") {
  const std::string dir = TempDir("priority");
  std::string log;
  const int code = RunServer({"--port=0", "--socket_priority=-3"}, dir + "/a.log", &log);
  INFO(log);
  REQUIRE(code == 1);
  REQUIRE_THAT(log, Catch::Contains("--socket_priority=-3 cannot be set here"));
}

TEST_CASE("--join without replicas, or with the wrong number of addresses: exit 2 saying why", "[startup][process]") {
  const std::string dir = TempDir("join-flags");
  std::string log;
  CHECK(RunServer({"--port=0", "--num_servers=2", "--join=127.0.0.1:1,127.0.0.1:2"}, dir + "/a.log", &log) == 2);
  CHECK_THAT(log, Catch::Contains("--join needs --replicas=2 or more"));
  CHECK(RunServer({"--port=0", "--num_servers=3", "--replicas=2", "--join=127.0.0.1:1,127.0.0.1:2"}, dir + "/b.log",
                  &log) == 2);
  CHECK_THAT(log, Catch::Contains("--join names 2 addresses; the job has 3 servers"));
}

TEST_CASE("FreePort: never the same port twice in a process, and none from the ephemeral range", "[startup]") {
  int ephemeral_low = 32768;
  if (FILE* range = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    REQUIRE(fscanf(range, "%d", &ephemeral_low) == 1);
    fclose(range);
  }
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    const int port = FreePort();
    REQUIRE(seen.insert(port).second);
    REQUIRE(port >= 10000);
    REQUIRE(port < std::max(11000, ephemeral_low));
  }
}

TEST_CASE("--peer_connect_timeout of 0 or past 20 s: exit 2 saying what it takes", "[startup][process]") {
  const std::string dir = TempDir("peer-connect-flags");
  std::string log;
  for (const char* timeout : {"0s", "21s"}) {
    CHECK(RunServer({"--port=0", "--num_servers=2", "--replicas=2", absl::StrCat("--peer_connect_timeout=", timeout)},
                    absl::StrCat(dir, "/", timeout, ".log"), &log) == 2);
    CHECK_THAT(log, Catch::Contains("--peer_connect_timeout is") && Catch::Contains("want more than 0 and at most 20s"));
  }
}

// Starts ps_server with `flags`, waits (up to 30 s) until it serves, stops
// it with SIGTERM; returns its exit code and its log in *log.
int ServeThenStop(const std::vector<std::string>& flags, const std::string& log_path, std::string* log) {
  ChildProcess server(RunfilePath("server/ps_server"), flags, log_path);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!absl::StrContains(ReadFile(log_path), "serving sync mode") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  server.Send(SIGTERM);
  const int code = server.Wait();
  *log = ReadFile(log_path);
  return code;
}

TEST_CASE("--peer_connect_timeout not below --server_timeout_for_failover: a warning, and the server serves",
          "[startup][process]") {
  const std::string dir = TempDir("peer-connect-warning");
  const std::vector<std::string> job = {"--port=0", "--num_servers=2", "--replicas=2",
                                        "--server_timeout_for_failover=3s"};
  const std::string warning = "is not below --server_timeout_for_failover";
  std::string log;
  for (const char* connect : {"3s", "5s"}) {
    std::vector<std::string> flags = job;
    flags.push_back(absl::StrCat("--peer_connect_timeout=", connect));
    CHECK(ServeThenStop(flags, absl::StrCat(dir, "/", connect, ".log"), &log) == 0);
    INFO(log);
    CHECK_THAT(log, Catch::Contains(absl::StrCat("--peer_connect_timeout ", connect, " ", warning)));
    CHECK_THAT(log, Catch::Contains("serving sync mode"));
  }
  CHECK(ServeThenStop(job, dir + "/default.log", &log) == 0);  // 1 s
  INFO(log);
  CHECK_THAT(log, !Catch::Contains(warning));
  CHECK_THAT(log, Catch::Contains("serving sync mode"));
}

TEST_CASE("--join with no job running anywhere: the server starts as usual, saying so", "[startup][process]") {
  const std::string dir = TempDir("join-nobody");
  std::string log;
  // Server 0's peer, server 1, is a port nothing listens on: a new job, or every server restarting.
  const int code = ServeThenStop({"--port=0", "--server_id=0", "--num_servers=2", "--replicas=2",
                                  absl::StrCat("--join=127.0.0.1:1,127.0.0.1:", FreePort())},
                                 dir + "/server.log", &log);
  INFO(log);
  CHECK_THAT(log, Catch::Contains("--join: no other server of the job runs it"));
  CHECK_THAT(log, Catch::Contains("serving sync mode"));
  CHECK(code == 0);
}

TEST_CASE("SIGTERM at any moment of start-up, a slow restore included, exits 0", "[startup][process]") {
  const std::string dir = TempDir("sigterm");
  // A 64 MB shard to restore, so that some signals land during the restore.
  ShardSnapshot shard;
  shard.layout = Layout{{{"w", {16 << 20}}}};
  shard.partition_bytes = 2 << 20;
  shard.optimizer = "sgd";
  for (uint32_t c = 0; c < 32; ++c) shard.keys.push_back({{0, c}, 0, std::vector<float>(512 << 10, 1.0f), {}});
  std::filesystem::create_directories(dir + "/ckpt");
  REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir + "/ckpt", 0, 1, 0), shard).ok());
  std::string phases;
  for (int delay_ms : {0, 2, 10, 30, 100, 300, 1000}) {
    const std::string log_path = absl::StrCat(dir, "/server-", delay_ms, ".log");
    ChildProcess server(RunfilePath("server/ps_server"),
                        {"--port=0", "--partition_bytes=2097152", "--checkpoint_dir=" + dir + "/ckpt"}, log_path);
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    bool started = false;
    while (!(started = BlocksSigterm(server.pid())) && absl::Now() < give_up) absl::SleepFor(absl::Microseconds(100));
    if (!started) FAIL("ps_server's main() never blocked SIGTERM within 10 s (delay " << delay_ms << " ms)");
    absl::SleepFor(absl::Milliseconds(delay_ms));
    server.Send(SIGTERM);
    const int code = server.Wait();
    const std::string log = ReadFile(log_path);
    INFO("SIGTERM " << delay_ms << " ms after main() began\n" << log);
    REQUIRE(code == 0);
    phases += log;
  }
  // The signals met the server in its phases: before or during the restore,
  // and once it served.
  REQUIRE_THAT(phases, Catch::Contains("received while restoring") || Catch::Contains("received before start-up"));
  REQUIRE_THAT(phases, Catch::Contains("received: shutting down"));
}

}  // namespace
}  // namespace shardps::testing
