// Replication on real processes (DESIGN.md, "Replication"): a job of 3
// ps_server and 2 ps_worker processes with --replicas=2, mlp on
// Fashion-MNIST. kill -9 of server 1 mid-run, never restarted: the workers
// go on without a rewind or a restart; a sync job ends at the weights of
// the same job run undisturbed, bit for bit (ps_worker's
// final_weights_fnv1a), an async one within half a point of its accuracy.
#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "tests/chaos/chaos_job.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

constexpr int kServers = 3, kWorkers = 2;
constexpr int64_t kKillAt = 300;  // of 936 steps
constexpr absl::Duration kDeadline = absl::Seconds(180);

std::vector<std::string> JobFlags(const std::string& mode = "sync") {
  return {"--mode=" + mode, "--replicas=2", "--model=mlp", "--epochs=2", "--batch_size=64", "--seed=7",
          "--optimizer=sgd", "--lr=0.04", "--momentum=0.9", "--lr_schedule=cosine", "--lr_total_steps=936",
          "--partition_bytes=65536", "--heartbeat_interval=1s", "--server_timeout=60s",
          "--server_timeout_for_failover=2s", "--log_every=100",
          "--log_level=info"};
}

std::string SummaryField(const std::string& dir, const std::string& field) {
  const std::string summary = ReadFile(dir + "/summary-0.json");
  const size_t at = summary.find("\"" + field + "\": ");
  if (at == std::string::npos) return "";
  const size_t from = at + field.size() + 4;
  return summary.substr(from, summary.find_first_of(",\n", from) - from);
}

enum class Fault { kNone, kKill, kPause };

// Runs the job; at step kKillAt, kill -9 of server 1, or SIGSTOP of it for
// 6 s (3 times the failover timeout) then SIGCONT. Returns what went
// wrong, or "".
std::string Run(ChaosJob& job, Fault fault, bool versions_count_pushes = false) {
  const absl::Time deadline = absl::Now() + kDeadline;
  job.Start();
  const bool kill = fault == Fault::kKill;
  if (fault != Fault::kNone) {
    while (job.Step(versions_count_pushes) < kKillAt && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    if (absl::Now() >= deadline) return "the job never reached the fault";
    if (kill) job.KillServer(1);
    if (fault == Fault::kPause) {
      job.SignalServer(1, SIGSTOP);
      absl::SleepFor(absl::Seconds(6));
      job.SignalServer(1, SIGCONT);
    }
  }
  const std::vector<int> workers = job.WaitWorkers(deadline);
  std::vector<int> servers = job.StopServers();
  if (kill) servers.erase(servers.begin() + 1);  // killed
  if (std::count(workers.begin(), workers.end(), 0) == kWorkers &&
      std::count(servers.begin(), servers.end(), 0) == static_cast<int>(servers.size())) {
    return "";
  }
  return absl::StrCat("exit codes: workers [", absl::StrJoin(workers, ", "), "], servers [",
                      absl::StrJoin(servers, ", "), "]");
}

TEST_CASE("replication: kill -9 of 1 of 3 servers loses no step and no bit of the weights", "[chaos][replication]") {
  const std::string calm_dir = TempDir("replication-undisturbed");
  ChaosJob calm(calm_dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string calm_error = Run(calm, Fault::kNone);
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());

  const std::string dir = TempDir("replication-killed");
  ChaosJob job(dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string error = Run(job, Fault::kKill);
  const std::string logs = job.AllLogs();
  INFO(error << "\n" << logs);
  REQUIRE(error.empty());
  const std::string calm_weights = SummaryField(calm_dir, "final_weights_fnv1a");
  REQUIRE(calm_weights.size() == 18);  // "0123456789abcdef", quoted
  CHECK(SummaryField(dir, "final_weights_fnv1a") == calm_weights);
  CHECK(SummaryField(dir, "final_test_accuracy") == SummaryField(calm_dir, "final_test_accuracy"));
  CHECK(SummaryField(dir, "rejoins") == "0");
  CHECK(SummaryField(dir, "steps_redone") == "0");
  CHECK_THAT(logs, Catch::Contains("server 1 failed") && Catch::Contains("its keys are served by server 2"));
  CHECK_THAT(logs, !Catch::Contains("rewound the job"));
}

TEST_CASE("replication: an async job goes on past a kill -9 at its undisturbed accuracy", "[chaos][replication]") {
  const std::string calm_dir = TempDir("replication-async-undisturbed");
  ChaosJob calm(calm_dir, JobFlags("async"), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string calm_error = Run(calm, Fault::kNone, /*versions_count_pushes=*/true);
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());

  const std::string dir = TempDir("replication-async-killed");
  ChaosJob job(dir, JobFlags("async"), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string error = Run(job, Fault::kKill, /*versions_count_pushes=*/true);
  const std::string logs = job.AllLogs();
  INFO(error << "\n" << logs);
  REQUIRE(error.empty());
  const double calm_accuracy = std::stod(SummaryField(calm_dir, "final_test_accuracy"));
  const double accuracy = std::stod(SummaryField(dir, "final_test_accuracy"));
  WARN("async: final test accuracy " << accuracy << " after the kill, " << calm_accuracy << " undisturbed");
  CHECK(accuracy == Approx(calm_accuracy).margin(0.005));
  CHECK(SummaryField(dir, "rejoins") == "0");
  CHECK_THAT(logs, Catch::Contains("server 1 failed"));
}

TEST_CASE("replication: a paused primary is failed over, and steps down when it resumes", "[chaos][replication]") {
  const std::string calm_dir = TempDir("replication-paused-undisturbed");
  ChaosJob calm(calm_dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string calm_error = Run(calm, Fault::kNone);
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());

  const std::string dir = TempDir("replication-paused");
  ChaosJob job(dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string error = Run(job, Fault::kPause);
  const std::string logs = job.AllLogs();
  INFO(error << "\n" << logs);
  REQUIRE(error.empty());  // server 1 too: it stepped down, and exits 0 on SIGTERM
  CHECK(SummaryField(dir, "final_weights_fnv1a") == SummaryField(calm_dir, "final_weights_fnv1a"));
  CHECK(SummaryField(dir, "rejoins") == "0");
  // Taken for failed by whoever noticed first: a worker's probe, or server 0,
  // whose updates server 1 backs up; the workers learn it either way.
  CHECK_THAT(logs, Catch::Contains("server 1 failed (") && Catch::Contains("served by server 2"));
  CHECK_THAT(ReadFile(job.ServerLog(1, 0)), Catch::Contains("steps down"));
}

}  // namespace
}  // namespace shardps::testing
