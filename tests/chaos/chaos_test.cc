// The chaos suite: a real job (2 ps_server and 3 ps_worker processes, mlp on
// Fashion-MNIST, the same flags but --mode; 3 epochs in sync, 5 in async and
// ssp, whose accuracy varies more from run to run) in each mode, broken at
// fixed steps:
//   step 120: kill -9 server 1, then start it again on its port;
//   step 320: kill -9 worker 2, then start it again as rank 2;
//   step 520: SIGSTOP server 0 for longer than --worker_timeout, then SIGCONT;
//   step 720: cut worker 1's links to both servers for 2 s.
// Every process must end with exit code 0, the final test accuracy must be
// within 1 point of the same job run undisturbed, and the logs must name
// each fault's recovery.
#include <catch2/catch.hpp>

#include <functional>

#include "absl/strings/match.h"
#include "tests/chaos/chaos_job.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

constexpr int kWorkers = 3;
constexpr absl::Duration kWorkerTimeout = absl::Seconds(4);
constexpr absl::Duration kJobDeadline = absl::Seconds(240);

std::vector<std::string> JobFlags(const std::string& mode, const std::string& dir) {
  // The same flags in every mode but --mode (ps_launch's recipe). Async and
  // ssp accuracy varies more from run to run (0.842-0.854 in five undisturbed
  // runs of 3 epochs, 0.855-0.866 after 5, before per-push scaling), so they
  // run 5 epochs.
  const int epochs = mode == "sync" ? 3 : 5;
  return {"--mode=" + mode, "--staleness=2", "--model=mlp", absl::StrCat("--epochs=", epochs), "--batch_size=64",
          "--seed=7", "--optimizer=sgd", "--lr=0.04", "--momentum=0.9", "--lr_schedule=cosine",
          absl::StrCat("--lr_total_steps=", epochs * 312),  // 60000 samples / 3 workers / batch 64
          "--partition_bytes=262144", "--checkpoint_dir=" + dir + "/checkpoints", "--checkpoint_every=100",
          absl::StrCat("--worker_timeout=", absl::FormatDuration(kWorkerTimeout)), "--heartbeat_interval=1s",
          "--server_timeout=60s", "--log_every=50", "--log_level=info"};
}

double FinalAccuracy(const std::string& dir) {
  const std::string summary = ReadFile(dir + "/summary-0.json");
  const size_t at = summary.find("\"final_test_accuracy\": ");
  return at == std::string::npos ? -1 : std::stod(summary.substr(at + 23));
}

// Logs a fault as the suite injects it, into the job's chaos.log and stderr.
void Note(const ChaosJob& job, const std::string& line) {
  std::ofstream(job.dir() + "/chaos.log", std::ios::app) << line << "\n";
  fprintf(stderr, "chaos: %s\n", line.c_str());
}

struct Fault {
  int64_t at_step;
  std::string what;
  std::function<void(ChaosJob&)> inject;
};

std::vector<Fault> Schedule() {
  return {
      {120, "kill -9 server 1, restart it 1 s later",
       [](ChaosJob& j) { j.KillServer(1); absl::SleepFor(absl::Seconds(1)); j.StartServer(1); }},
      {320, "kill -9 worker 2, restart it as rank 2 1 s later",
       [](ChaosJob& j) { j.KillWorker(2); absl::SleepFor(absl::Seconds(1)); j.StartWorker(2); }},
      {520, "SIGSTOP server 0 for worker_timeout + 2 s, then SIGCONT",
       [](ChaosJob& j) {
         j.SignalServer(0, SIGSTOP);
         absl::SleepFor(kWorkerTimeout + absl::Seconds(2));
         j.SignalServer(0, SIGCONT);
       }},
      {720, "cut worker 1's links to both servers for 2 s", [](ChaosJob& j) { j.CutLinks(); }},
  };
}

// Runs the job to the end, injecting `faults` at their steps. Returns an
// empty string when every process ended with 0, else what went wrong.
std::string RunJob(ChaosJob& job, bool versions_count_pushes, const std::vector<Fault>& faults) {
  const absl::Time deadline = absl::Now() + kJobDeadline;
  job.Start();
  for (const Fault& f : faults) {
    int64_t step = -1;
    while ((step = job.Step(versions_count_pushes)) < f.at_step && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (absl::Now() >= deadline) return absl::StrCat("the job never reached step ", f.at_step);
    Note(job, absl::StrCat("at step ", step, ": ", f.what));
    f.inject(job);
  }
  const std::vector<int> workers = job.WaitWorkers(deadline);
  const std::vector<int> servers = job.StopServers();
  const bool all_zero = std::count(workers.begin(), workers.end(), 0) == kWorkers &&
                        std::count(servers.begin(), servers.end(), 0) == static_cast<int>(servers.size());
  if (all_zero) return "";
  return absl::StrCat("exit codes: workers [", absl::StrJoin(workers, ", "), "] (-2: still running at the deadline), "
                      "servers [", absl::StrJoin(servers, ", "), "]");
}

void RunChaos(const std::string& mode) {
  const bool per_push = mode != "sync";  // versions count every worker's push
  const std::string calm_dir = TempDir("chaos-" + mode + "-undisturbed");
  ChaosJob calm(calm_dir, JobFlags(mode, calm_dir), 2, kWorkers, /*proxied_rank=*/1);
  const std::string calm_error = RunJob(calm, per_push, {});
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());
  const double calm_accuracy = FinalAccuracy(calm_dir);

  const std::string dir = TempDir("chaos-" + mode);
  ChaosJob job(dir, JobFlags(mode, dir), 2, kWorkers, /*proxied_rank=*/1);
  const std::string error = RunJob(job, per_push, Schedule());
  const std::string logs = job.AllLogs();
  INFO(error << "\nchaos log:\n" << ReadFile(dir + "/chaos.log") << "\n" << logs);
  REQUIRE(error.empty());
  const double accuracy = FinalAccuracy(dir);
  WARN(mode << ": final test accuracy " << accuracy << " with faults, " << calm_accuracy << " undisturbed");
  REQUIRE(accuracy == Approx(calm_accuracy).margin(0.01));
  // Each recovery, named in the logs.
  REQUIRE_THAT(logs, Catch::Contains("server 1 at 127.0.0.1:") && Catch::Contains("restarted (incarnation"));
  if (per_push && mode == "async") {
    REQUIRE_THAT(logs, Catch::Contains("registered again after"));
  } else {
    REQUIRE_THAT(logs, Catch::Contains("rewound the job to step") && Catch::Contains("rejoined the job at step"));
  }
  REQUIRE_THAT(ReadFile(job.WorkerLog(2, 1)), Catch::Contains("joined the job at step"));
  REQUIRE_THAT(ReadFile(job.ServerLog(0, 0)), Catch::Contains("did not run for"));
  REQUIRE_THAT(ReadFile(job.WorkerLog(1, 0)), Catch::Contains("waiting for server"));
}

TEST_CASE("chaos: a sync job survives server and worker kills, a paused server and a cut link", "[chaos]") {
  RunChaos("sync");
}

TEST_CASE("chaos: an async job survives server and worker kills, a paused server and a cut link", "[chaos]") {
  RunChaos("async");
}

TEST_CASE("chaos: an ssp job survives server and worker kills, a paused server and a cut link", "[chaos]") {
  RunChaos("ssp");
}

}  // namespace
}  // namespace shardps::testing
