// A ShardPS job of real processes on 127.0.0.1 that a test can break: 2
// ps_server and 3 ps_worker processes by default, one worker's links to the
// servers through tcp_proxy so that they can be cut. Servers keep their port
// across restarts, as a cluster's fixed addresses do. Every fault and every
// process's log is kept in the job's directory.
//
// Not thread-safe: driven from the test's main thread.
#ifndef SHARDPS_TESTS_CHAOS_CHAOS_JOB_H_
#define SHARDPS_TESTS_CHAOS_CHAOS_JOB_H_

#include <signal.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "proto/shardps.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace shardps::testing {

class ChaosJob {
 public:
  // `job_flags` go into the job's flag file; `proxied_rank` reaches the
  // servers through tcp_proxy (-1: none).
  ChaosJob(std::string dir, const std::vector<std::string>& job_flags, int servers, int workers, int proxied_rank)
      : dir_(std::move(dir)), servers_(servers), workers_(workers), proxied_rank_(proxied_rank) {
    std::ofstream out(dir_ + "/job.flags");
    for (const std::string& f : job_flags) out << f << "\n";
    out << "--num_servers=" << servers << "\n--num_workers=" << workers << "\n";
    for (int s = 0; s < servers; ++s) ports_.push_back(FreePort());
    server_procs_.resize(servers);
    worker_procs_.resize(workers);
    worker_runs_.assign(workers, 0);
    server_runs_.assign(servers, 0);
  }

  void Start() {
    for (int s = 0; s < servers_; ++s) StartServer(s);
    for (int s = 0; s < servers_ && proxied_rank_ >= 0; ++s) {
      const int port = FreePort();
      proxies_.push_back(std::make_unique<ChildProcess>(
          RunfilePath("tests/chaos/tcp_proxy"),
          std::vector<std::string>{absl::StrCat("--target=127.0.0.1:", ports_[s]), absl::StrCat("--listen_port=", port)},
          absl::StrCat(dir_, "/proxy-", s, ".log")));
      proxy_ports_.push_back(port);
    }
    for (int r = 0; r < workers_; ++r) StartWorker(r);
  }

  // The job's step as the servers report it: sync, a key's version; async
  // and ssp, where versions count every worker's pushes, that over the
  // number of workers. -1 when no server answers.
  int64_t Step(bool versions_count_pushes) {
    int64_t step = -1;
    for (int s = 0; s < servers_; ++s) {
      auto stub = wire::ParameterService::NewStub(
          grpc::CreateChannel(absl::StrCat("127.0.0.1:", ports_[s]), grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(300)));
      wire::AdminRequest req;
      req.set_action(wire::ADMIN_STATUS);
      wire::AdminResponse resp;
      if (!stub->Admin(&ctx, req, &resp).ok()) continue;
      const int64_t v = resp.status().max_version();
      step = std::max(step, versions_count_pushes ? v / workers_ : v);
    }
    return step;
  }

  // `extra` flags after the job's (--join=..., say).
  void StartServer(int s, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"--flagfile=" + dir_ + "/job.flags", absl::StrCat("--server_id=", s),
                                  absl::StrCat("--port=", ports_[s])};
    args.insert(args.end(), extra.begin(), extra.end());
    server_procs_[s] = std::make_unique<ChildProcess>(RunfilePath("server/ps_server"), args,
                                                      absl::StrCat(dir_, "/server-", s, ".", server_runs_[s]++, ".log"));
  }
  // Server `s`'s next process listens on a new port: a spare on another
  // machine taking a failed server's place. The workers keep the address
  // they were started with.
  void MoveServer(int s) { ports_[s] = FreePort(); }
  // Every server's address, in id order, comma-separated.
  std::string ServerAddresses() const {
    std::vector<std::string> addresses;
    for (int port : ports_) addresses.push_back(absl::StrCat("127.0.0.1:", port));
    return absl::StrJoin(addresses, ",");
  }
  // The log of server `s`'s latest process.
  std::string LatestServerLog(int s) const { return ReadFile(ServerLog(s, server_runs_[s] - 1)); }
  void StartWorker(int r) {
    std::vector<std::string> addresses;
    for (int s = 0; s < servers_; ++s) {
      addresses.push_back(absl::StrCat("127.0.0.1:", r == proxied_rank_ ? proxy_ports_[s] : ports_[s]));
    }
    worker_procs_[r] = std::make_unique<ChildProcess>(
        RunfilePath("worker/ps_worker"),
        std::vector<std::string>{"--flagfile=" + dir_ + "/job.flags", "--servers=" + absl::StrJoin(addresses, ","),
                                 absl::StrCat("--rank=", r),
                                 absl::StrCat("--summary_json=", dir_, "/summary-", r, ".json")},
        WorkerLog(r, worker_runs_[r]++));
  }

  // kill -9, and reaps it.
  void KillServer(int s) { Kill(*server_procs_[s]); }
  void KillWorker(int r) { Kill(*worker_procs_[r]); }
  void SignalServer(int s, int sig) { server_procs_[s]->Send(sig); }
  // Resets the proxied worker's links and refuses new ones for the proxy's --cut.
  void CutLinks() {
    for (auto& p : proxies_) p->Send(SIGUSR1);
  }

  // Waits for every worker until `deadline`; returns each rank's exit code
  // (of its latest process), or -2 for one still running at the deadline.
  std::vector<int> WaitWorkers(absl::Time deadline) {
    std::vector<int> codes(workers_, -2);
    std::vector<bool> ended(workers_, false);
    while (absl::Now() < deadline && std::count(ended.begin(), ended.end(), false) > 0) {
      for (int r = 0; r < workers_; ++r) {
        if (!ended[r]) ended[r] = worker_procs_[r]->Ended(&codes[r]);
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return codes;
  }
  // SIGTERM to every server; their exit codes.
  std::vector<int> StopServers() {
    std::vector<int> codes;
    for (auto& s : server_procs_) {
      s->Send(SIGTERM);
      codes.push_back(s->Wait());
    }
    for (auto& p : proxies_) p->Send(SIGTERM);
    return codes;
  }

  std::string WorkerLog(int r, int run) const { return absl::StrCat(dir_, "/worker-", r, ".", run, ".log"); }
  std::string ServerLog(int s, int run) const { return absl::StrCat(dir_, "/server-", s, ".", run, ".log"); }
  // Every log of the job, concatenated.
  std::string AllLogs() const {
    std::string all;
    for (int s = 0; s < servers_; ++s) {
      for (int run = 0; run < server_runs_[s]; ++run) all += ReadFile(ServerLog(s, run));
    }
    for (int r = 0; r < workers_; ++r) {
      for (int run = 0; run < worker_runs_[r]; ++run) all += ReadFile(WorkerLog(r, run));
    }
    return all;
  }
  const std::string& dir() const { return dir_; }

 private:
  static void Kill(ChildProcess& p) {
    p.Send(SIGKILL);
    p.Wait();
  }

  const std::string dir_;
  const int servers_, workers_, proxied_rank_;
  std::vector<int> ports_, proxy_ports_;
  std::vector<std::unique_ptr<ChildProcess>> server_procs_, worker_procs_, proxies_;
  std::vector<int> server_runs_, worker_runs_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_CHAOS_CHAOS_JOB_H_
