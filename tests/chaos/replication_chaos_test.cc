// Replication on real processes (DESIGN.md, "Replication"): a job of 3
// ps_server and 2 ps_worker processes with --replicas=2, mlp on
// Fashion-MNIST. kill -9 of server 1 mid-run, never restarted: the workers
// go on without a rewind or a restart; a sync job ends at the weights of
// the same job run undisturbed, bit for bit (ps_worker's
// final_weights_fnv1a), an async one within half a point of its accuracy.
// And re-replication: the killed server started again with --join is copied
// its keys while the job runs, after which the kill of the other copy's
// server loses nothing either.
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

// Whether a server's log says it learned it was taken for failed.
bool StepsDown(const std::string& log) {
  return absl::StrContains(log, "is named failed") || absl::StrContains(log, "stepping down");
}

// kPauseRejoinKill: the pause, then once server 1 has joined again by
// itself (live again) and 40 more steps have passed, kill -9 of server 2.
enum class Fault { kNone, kKill, kPause, kPauseRejoinKill };

// Runs the job; at step kKillAt, kill -9 of server 1, or (at kKillAt / 3) SIGSTOP of it for
// 6 s (3 times the failover timeout) then SIGCONT. Returns what went
// wrong, or "".
std::string Run(ChaosJob& job, Fault fault, bool versions_count_pushes = false) {
  const absl::Time deadline = absl::Now() + kDeadline;
  job.Start();
  const bool kill = fault == Fault::kKill;
  if (fault != Fault::kNone) {
    // Pauses come earlier and their jobs run 4 epochs, so that the job is
    // still running when server 1 resumes (636 steps could pass within the
    // 6 s pause on a quiet machine, and a server that resumes after the job
    // has no one to tell it that it was failed), and to leave the rejoin
    // case steps for its kill.
    const bool pause = fault == Fault::kPause || fault == Fault::kPauseRejoinKill;
    const int64_t at = pause ? kKillAt / 3 : kKillAt;
    while (job.Step(versions_count_pushes) < at && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    if (absl::Now() >= deadline) return "the job never reached the fault";
    if (kill) job.KillServer(1);
    if (pause) {
      job.SignalServer(1, SIGSTOP);
      absl::SleepFor(absl::Seconds(6));
      job.SignalServer(1, SIGCONT);
      // Its step-down is part of what the case checks: the job ends after it.
      while (!StepsDown(job.LatestServerLog(1)) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
      if (absl::Now() >= deadline) return "server 1 never stepped down after its pause";
    }
    if (fault == Fault::kPauseRejoinKill) {
      while (!absl::StrContains(job.LatestServerLog(1), "live again") && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      if (absl::Now() >= deadline) return "server 1 never joined again after its pause";
      const int64_t live_at = job.Step(versions_count_pushes);
      while (job.Step(versions_count_pushes) < live_at + 40 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
      if (job.Step(versions_count_pushes) >= 2 * 936 - 20) return "the job ended before the kill of server 2";
      job.KillServer(2);
    }
  }
  const std::vector<int> workers = job.WaitWorkers(deadline);
  std::vector<int> servers = job.StopServers();
  if (kill) servers.erase(servers.begin() + 1);  // killed
  if (fault == Fault::kPauseRejoinKill) servers.erase(servers.begin() + 2);
  if (std::count(workers.begin(), workers.end(), 0) == kWorkers &&
      std::count(servers.begin(), servers.end(), 0) == static_cast<int>(servers.size())) {
    return "";
  }
  return absl::StrCat("exit codes: workers [", absl::StrJoin(workers, ", "), "], servers [",
                      absl::StrJoin(servers, ", "), "]");
}

// Waits until the job's step passes `step`; false at the deadline.
bool AwaitStep(ChaosJob& job, int64_t step, absl::Time deadline) {
  while (job.Step(false) < step && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  return absl::Now() < deadline;
}

// Sync: kill -9 of server 1 at kKillAt; 40 steps later it is started again
// with --join (`spare`: on a new port, as a spare machine would be); as
// soon as it logs that it is live again (every key copied), kill -9 of
// server 2, which served server 1's keys meanwhile (the workers may not even
// have heard that server 1 is live). Returns what went wrong, or "".
std::string RunKillRejoinKill(ChaosJob& job, bool spare = false) {
  const absl::Time deadline = absl::Now() + kDeadline;
  job.Start();
  if (!AwaitStep(job, kKillAt, deadline)) return "the job never reached the first kill";
  job.KillServer(1);
  if (!AwaitStep(job, kKillAt + 40, deadline)) return "the job did not go on after the first kill";
  if (spare) job.MoveServer(1);
  job.StartServer(1, {"--join=" + job.ServerAddresses()});
  while (!absl::StrContains(job.LatestServerLog(1), "live again") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (absl::Now() >= deadline) return "server 1 never became live again after --join";
  // At once: what the workers read while server 1 was filled must be there too.
  job.KillServer(2);
  const std::vector<int> workers = job.WaitWorkers(deadline);
  std::vector<int> servers = job.StopServers();
  servers.erase(servers.begin() + 2);  // killed
  if (std::count(workers.begin(), workers.end(), 0) == kWorkers &&
      std::count(servers.begin(), servers.end(), 0) == static_cast<int>(servers.size())) {
    return "";
  }
  return absl::StrCat("exit codes: workers [", absl::StrJoin(workers, ", "), "], servers [",
                      absl::StrJoin(servers, ", "), "]");
}

struct Runs {
  std::string calm_dir, dir, logs;
};

// The job run undisturbed, then again with `fault`; each must end with
// every exit code 0. `name` names their directories.
Runs UndisturbedThen(const std::string& name, const std::string& mode, Fault fault,
                     const std::vector<std::string>& extra_flags = {}) {
  const bool per_push = mode != "sync";  // versions count every worker's push
  Runs r{TempDir("replication-" + name + "-undisturbed"), TempDir("replication-" + name), ""};
  std::vector<std::string> flags = JobFlags(mode);
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  ChaosJob calm(r.calm_dir, flags, kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string calm_error = Run(calm, Fault::kNone, per_push);
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());
  ChaosJob job(r.dir, flags, kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string error = Run(job, fault, per_push);
  r.logs = job.AllLogs();
  INFO(error << "\n" << r.logs);
  REQUIRE(error.empty());  // a server that stepped down exits 0 on SIGTERM too
  return r;
}

TEST_CASE("replication: kill -9 of 1 of 3 servers loses no step and no bit of the weights", "[chaos][replication]") {
  const Runs r = UndisturbedThen("killed", "sync", Fault::kKill);
  INFO(r.logs);
  const std::string calm_weights = SummaryField(r.calm_dir, "final_weights_fnv1a");
  REQUIRE(calm_weights.size() == 18);  // "0123456789abcdef", quoted
  CHECK(SummaryField(r.dir, "final_weights_fnv1a") == calm_weights);
  CHECK(SummaryField(r.dir, "final_test_accuracy") == SummaryField(r.calm_dir, "final_test_accuracy"));
  CHECK(SummaryField(r.dir, "rejoins") == "0");
  CHECK(SummaryField(r.dir, "steps_redone") == "0");
  CHECK_THAT(r.logs, Catch::Contains("server 1 failed") && Catch::Contains("its keys are served by server 2"));
  CHECK_THAT(r.logs, !Catch::Contains("rewound the job"));
}

TEST_CASE("replication: an async job goes on past a kill -9 at its undisturbed accuracy", "[chaos][replication]") {
  const Runs r = UndisturbedThen("async-killed", "async", Fault::kKill);
  INFO(r.logs);
  const double calm_accuracy = std::stod(SummaryField(r.calm_dir, "final_test_accuracy"));
  const double accuracy = std::stod(SummaryField(r.dir, "final_test_accuracy"));
  WARN("async: final test accuracy " << accuracy << " after the kill, " << calm_accuracy << " undisturbed");
  CHECK(accuracy == Approx(calm_accuracy).margin(0.005));
  CHECK(SummaryField(r.dir, "rejoins") == "0");
  CHECK_THAT(r.logs, Catch::Contains("server 1 failed"));
}

TEST_CASE("replication: a paused primary is failed over, and steps down when it resumes", "[chaos][replication]") {
  // 4 epochs (1872 steps): the job is still running when server 1 resumes.
  const Runs r = UndisturbedThen("paused", "sync", Fault::kPause, {"--epochs=4"});
  INFO(r.logs);
  CHECK(SummaryField(r.dir, "final_weights_fnv1a") == SummaryField(r.calm_dir, "final_weights_fnv1a"));
  CHECK(SummaryField(r.dir, "rejoins") == "0");
  // Taken for failed by whoever noticed first: a worker's probe, or server 0,
  // whose updates server 1 backs up; the workers learn it either way.
  CHECK_THAT(r.logs, Catch::Contains("server 1 failed (") && Catch::Contains("served by server 2"));
  // Its step-down: Run waits for it before it ends the job.
}

// The job run undisturbed, then with RunKillRejoinKill (`spare`: on a new
// port); each must end with every exit code 0. Both runs keep every step:
// two servers killed, one after the other, and the weights to the bit.
Runs UndisturbedThenKillRejoinKill(const std::string& name, bool spare) {
  Runs r{TempDir("replication-" + name + "-undisturbed"), TempDir("replication-" + name), ""};
  ChaosJob calm(r.calm_dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string calm_error = Run(calm, Fault::kNone);
  INFO(calm_error << "\n" << calm.AllLogs());
  REQUIRE(calm_error.empty());
  ChaosJob job(r.dir, JobFlags(), kServers, kWorkers, /*proxied_rank=*/-1);
  const std::string error = RunKillRejoinKill(job, spare);
  r.logs = job.AllLogs();
  INFO(error << "\n" << r.logs);
  REQUIRE(error.empty());
  CHECK(SummaryField(r.dir, "final_weights_fnv1a") == SummaryField(r.calm_dir, "final_weights_fnv1a"));
  CHECK(SummaryField(r.dir, "rejoins") == "0");
  CHECK(SummaryField(r.dir, "steps_redone") == "0");
  CHECK_THAT(r.logs, Catch::Contains("server 1 is live again") && Catch::Contains("registering with it"));
  CHECK_THAT(r.logs, Catch::Contains("server 1 learns that server 2 failed"));
  CHECK_THAT(r.logs, !Catch::Contains("rewound the job"));
  return r;
}

TEST_CASE("replication: a killed server joins again, is re-filled, and then the other copy can go", "[chaos][replication]") {
  const Runs r = UndisturbedThenKillRejoinKill("rejoin", /*spare=*/false);
  INFO(r.logs);
  CHECK_THAT(r.logs, Catch::Contains("server 1 joins the job"));
  CHECK_THAT(r.logs, Catch::Contains("copying") && Catch::Contains("to server 1, which joins"));
  CHECK_THAT(r.logs, Catch::Contains("server 2 failed"));
  CHECK_THAT(r.logs, !Catch::Contains("joins at a new address") && !Catch::Contains("joined the job at a new address"));
}

TEST_CASE("replication: a spare joins at a new address in a killed server's place, and then the other copy can go",
          "[chaos][replication]") {
  // The workers were started with server 1's old address, where nothing
  // listens any more: they reach the spare only through what they learned.
  const Runs r = UndisturbedThenKillRejoinKill("spare", /*spare=*/true);
  INFO(r.logs);
  CHECK_THAT(r.logs, Catch::Contains("server 0 learns that server 1 joins at a new address"));
  CHECK_THAT(r.logs, Catch::Contains("server 2 learns that server 1 joins at a new address"));
  CHECK_THAT(r.logs, Catch::Contains("server 1 joined the job at a new address"));  // a worker
}

TEST_CASE("replication: a paused primary steps down, joins again by itself, and then takes over from the other copy",
          "[chaos][replication]") {
  // 4 epochs (1872 steps; the schedule's lr is at its minimum after 936): room for the pause, the rejoin and the kill.
  const Runs r = UndisturbedThen("paused-rejoined", "sync", Fault::kPauseRejoinKill, {"--epochs=4"});
  INFO(r.logs);
  CHECK(SummaryField(r.dir, "final_weights_fnv1a") == SummaryField(r.calm_dir, "final_weights_fnv1a"));
  CHECK(SummaryField(r.dir, "rejoins") == "0");
  CHECK_THAT(r.logs, Catch::Contains("server 1 stepped down and joins the job again"));
  CHECK_THAT(r.logs, Catch::Contains("[server 1] server 1 has a copy of every key it holds"));
  CHECK_THAT(r.logs, Catch::Contains("server 1 learns that server 2 failed"));
}

}  // namespace
}  // namespace shardps::testing
