// Multi-process end-to-end: real ps_server and ps_worker binaries, 2 servers
// and 2 workers on 127.0.0.1, the real Fashion-MNIST data from Debian's
// dataset-fashion-mnist, a few hundred steps in each mode.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_context.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace shardps::testing {
namespace {

// Every number that follows `"key": ` in `json`, in order.
std::vector<double> JsonNumbers(const std::string& json, const std::string& key) {
  std::vector<double> out;
  std::regex re("\"" + key + "\": (-?[0-9.e+-]+)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

struct Cluster {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::string addresses;
};

// Writes the job's flags to one flag file that every process reads, as users
// do; returns the --flagfile argument.
std::vector<std::string> JobFile(const std::string& dir, const std::vector<std::string>& flags) {
  std::ofstream out(dir + "/job.flags");
  for (const std::string& f : flags) out << f << "\n";
  return {"--flagfile=" + dir + "/job.flags"};
}

Cluster StartServers(const std::vector<std::string>& job) {
  Cluster c;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::string> args = job;
    args.push_back(absl::StrCat("--server_id=", s));
    args.push_back("--port=0");
    args.push_back("--log_level=warn");
    c.servers.push_back(std::make_unique<ServerProcess>(RunfilePath("server/ps_server"), args));
    c.addresses += absl::StrCat(s ? "," : "", "127.0.0.1:", c.servers.back()->port());
  }
  return c;
}

std::vector<std::string> WorkerArgs(const std::vector<std::string>& job, const Cluster& c, int rank,
                                    const std::string& dir) {
  std::vector<std::string> args = job;
  args.push_back("--servers=" + c.addresses);
  args.push_back(absl::StrCat("--rank=", rank));
  args.push_back(absl::StrCat("--summary_json=", dir, "/summary-", rank, ".json"));
  return args;
}

// Runs a job of 2 servers and 2 worker processes to the end (every process
// must exit 0) and returns rank 0's summary JSON.
std::string RunJob(const std::string& dir, const std::vector<std::string>& job) {
  Cluster cluster = StartServers(job);
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(std::make_unique<ChildProcess>(RunfilePath("worker/ps_worker"), WorkerArgs(job, cluster, r, dir),
                                                     absl::StrCat(dir, "/worker-", r, ".log")));
  }
  for (int r = 0; r < 2; ++r) {
    INFO(ReadFile(absl::StrCat(dir, "/worker-", r, ".log")));
    REQUIRE(workers[r]->Wait() == 0);
  }
  for (auto& s : cluster.servers) REQUIRE(WEXITSTATUS(s->Signal(SIGTERM)) == 0);
  return ReadFile(dir + "/summary-0.json");
}

TEST_CASE("2 servers and 2 workers train mlp on Fashion-MNIST in every mode", "[e2e][process]") {
  for (const char* mode : {"sync", "async", "ssp"}) {
    DYNAMIC_SECTION(mode) {
      const std::string dir = TempDir(absl::StrCat("e2e-", mode));
      // The same flags in every mode: async and ssp take each push as 1/N of
      // a step (--async_lr_scaling=workers, the default).
      const std::vector<std::string> job = JobFile(dir, {
          "--num_servers=2", "--num_workers=2", absl::StrCat("--mode=", mode), "--staleness=2",
          "--model=mlp", "--optimizer=sgd", "--lr=0.05", "--momentum=0.9", "--batch_size=64",
          "--epochs=2", "--max_steps_per_epoch=250", "--log_every=50", "--partition_bytes=262144"});
      const std::string summary = RunJob(dir, job);
      INFO(summary);
      const std::vector<double> losses = JsonNumbers(summary, "mean_loss");
      REQUIRE(losses.size() == 2);
      REQUIRE(losses[1] < losses[0]);  // loss falls
      const std::vector<double> accuracy = JsonNumbers(summary, "final_test_accuracy");
      REQUIRE(accuracy.size() == 1);
      // 500 steps of 2 x 64 samples: well past chance (0.1); 0.75 is the bound stated in the README.
      WARN(mode << ": test accuracy " << accuracy[0]);
      REQUIRE(accuracy[0] >= 0.75);
    }
  }
}

TEST_CASE("with --wire_dtype=bfloat16 the job trains as well and moves half the bytes", "[e2e][process]") {
  const std::string dir = TempDir("e2e-bfloat16");
  const std::vector<std::string> job = JobFile(dir, {
      "--num_servers=2", "--num_workers=2", "--mode=sync", "--model=mlp", "--optimizer=sgd", "--lr=0.05",
      "--momentum=0.9", "--batch_size=64", "--epochs=2", "--max_steps_per_epoch=250", "--log_every=50",
      "--partition_bytes=262144", "--wire_dtype=bfloat16"});
  const std::string summary = RunJob(dir, job);
  INFO(summary);
  // mlp has 235146 parameters: pushed and pulled at 2 bytes each.
  REQUIRE(JsonNumbers(summary, "bytes_per_step") == std::vector<double>{2 * 235146 * 2});
  const std::vector<double> accuracy = JsonNumbers(summary, "final_test_accuracy");
  REQUIRE(accuracy.size() == 1);
  WARN("sync, bfloat16 on the wire: test accuracy " << accuracy[0]);
  REQUIRE(accuracy[0] >= 0.75);  // as float32 (0.834 in the same run length)
}

// One server and one worker for `epochs` epochs of 100 steps with `flags`;
// returns the worker's exit code, and its log and summary.
int RunSmallJob(const std::string& dir, const std::vector<std::string>& flags, std::string* log, std::string* summary) {
  std::vector<std::string> job = JobFile(dir, flags);
  std::vector<std::string> server_args = job;
  server_args.insert(server_args.end(), {"--port=0", "--log_level=warn"});
  ServerProcess server(RunfilePath("server/ps_server"), server_args);
  std::vector<std::string> worker_args = job;
  worker_args.insert(worker_args.end(), {absl::StrCat("--servers=127.0.0.1:", server.port()), "--rank=0",
                                         "--summary_json=" + dir + "/summary.json"});
  ChildProcess worker(RunfilePath("worker/ps_worker"), worker_args, dir + "/worker.log");
  const int code = worker.Wait();
  *log = ReadFile(dir + "/worker.log");
  *summary = ReadFile(dir + "/summary.json");
  return code;
}

TEST_CASE("a diverging run is reported: a planted huge learning rate warns, the recipe does not", "[e2e][process]") {
  const std::vector<std::string> common = {"--num_servers=1", "--num_workers=1", "--model=mlp", "--epochs=3",
                                           "--max_steps_per_epoch=100", "--log_every=0", "--momentum=0.9"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  std::string log, summary;
  // lr 1 with momentum 0.9: the network collapses to chance (loss ln 10).
  REQUIRE(RunSmallJob(TempDir("diverge"), with({"--lr=1"}), &log, &summary) == 0);
  INFO(log);
  REQUIRE_THAT(log, Catch::Contains("training diverges: epoch 1's mean loss") &&
                        Catch::Contains("a learning rate too large for sync mode with 1 worker"));
  REQUIRE_THAT(summary, Catch::Contains("\"divergence\": \"training diverges"));
  // --stop_on_divergence: the worker exits non-zero at that epoch's end.
  REQUIRE(RunSmallJob(TempDir("diverge-stop"), with({"--lr=1", "--stop_on_divergence"}), &log, &summary) != 0);
  REQUIRE_THAT(log, Catch::Contains("(--stop_on_divergence)"));
  // The recipe trains: no warning.
  REQUIRE(RunSmallJob(TempDir("converge"), with({"--lr=0.04", "--lr_schedule=cosine", "--lr_total_steps=300"}),
                      &log, &summary) == 0);
  REQUIRE_THAT(log, !Catch::Contains("diverg"));
  REQUIRE_THAT(summary, Catch::Contains("\"divergence\": null"));
}

TEST_CASE("a worker waits for a dead address up to --server_timeout, logging it, then fails naming it",
          "[e2e][process]") {
  const std::string dir = TempDir("dead");
  ChildProcess worker(RunfilePath("worker/ps_worker"),
                      {"--servers=127.0.0.1:1", "--rank=0", "--num_workers=1", "--server_timeout=1s",
                       "--max_steps_per_epoch=1"},
                      dir + "/worker.log");
  REQUIRE(worker.Wait() != 0);
  const std::string log = ReadFile(dir + "/worker.log");
  REQUIRE_THAT(log, Catch::Contains("waiting for server 0 at 127.0.0.1:1"));
  REQUIRE_THAT(log, Catch::Contains("server 0 at 127.0.0.1:1 (after ") && Catch::Contains("server timeout 1s"));
}

TEST_CASE("a worker picks its device: auto logs the choice, cuda needs a GPU, others are refused",
          "[e2e][process]") {
  const std::string dir = TempDir("device");
  auto run = [&](const std::string& device) {
    ChildProcess worker(RunfilePath("worker/ps_worker"),
                        {"--servers=127.0.0.1:1", "--rank=0", "--num_workers=1", "--server_timeout=100ms",
                         "--device=" + device},
                        dir + "/" + device + ".log");
    const int code = worker.Wait();
    return std::pair{code, ReadFile(dir + "/" + device + ".log")};
  };
  const bool has_gpu = CudaDeviceCount().ok();
  auto [auto_code, auto_log] = run("auto");
  CHECK(auto_code != 0);  // nothing listens on 127.0.0.1:1
  CHECK_THAT(auto_log, Catch::Contains(has_gpu ? "device auto: using cuda:0" : "device auto: no usable GPU (") &&
                           Catch::Contains(has_gpu ? " on cuda:0" : " on cpu ("));
  auto [cuda_code, cuda_log] = run("cuda");
  CHECK(cuda_code != 0);
  CHECK_THAT(cuda_log, has_gpu ? Catch::Contains("device cuda: using cuda:0")
                               : Catch::Contains("--device=cuda: cudaGetDeviceCount: "));
  auto [bogus_code, bogus_log] = run("tpu");
  CHECK(bogus_code != 0);
  CHECK_THAT(bogus_log, Catch::Contains("unknown --device 'tpu'; want auto, cpu or cuda"));
}

TEST_CASE("a worker refuses a wait or period of 0 or less, naming it (a 0 heartbeat interval sent without pause)",
          "[e2e][process]") {
  const std::string dir = TempDir("durations");
  for (const std::string flag : {"--heartbeat_interval=0", "--pull_timeout=-1s", "--server_timeout=0s"}) {
    ChildProcess worker(RunfilePath("worker/ps_worker"), {"--servers=127.0.0.1:1", "--rank=0", "--num_workers=1", flag},
                        dir + "/worker.log");
    CHECK(worker.Wait() != 0);
    const std::string name = flag.substr(2, flag.find('=') - 2);
    CHECK_THAT(ReadFile(dir + "/worker.log"), Catch::Contains(name + " is ") && Catch::Contains("; want more than 0"));
  }
}

TEST_CASE("a worker with another model is refused at registration; the others train on", "[e2e][process]") {
  const std::string dir = TempDir("mismatch");
  const std::vector<std::string> job =
      JobFile(dir, {"--num_servers=2", "--num_workers=2", "--mode=sync", "--model=mlp", "--batch_size=64",
                    "--epochs=1", "--max_steps_per_epoch=60", "--log_every=5"});
  Cluster cluster = StartServers(job);
  ChildProcess w0(RunfilePath("worker/ps_worker"), WorkerArgs(job, cluster, 0, dir), dir + "/worker-0.log");
  ChildProcess w1(RunfilePath("worker/ps_worker"), WorkerArgs(job, cluster, 1, dir), dir + "/worker-1.log");
  // Once both have registered and trained a few steps, a worker with the cnn model tries to join.
  for (int i = 0; i < 600 && ReadFile(dir + "/worker-0.log").find("step 5/") == std::string::npos; ++i) {
    usleep(50000);
  }
  std::vector<std::string> rogue_args = WorkerArgs(job, cluster, 1, dir);
  rogue_args.push_back("--model=cnn");
  rogue_args.push_back("--summary_json=");
  ChildProcess rogue(RunfilePath("worker/ps_worker"), rogue_args, dir + "/rogue.log");
  REQUIRE(rogue.Wait() != 0);
  const std::string log = ReadFile(dir + "/rogue.log");
  INFO(log);
  REQUIRE_THAT(log, Catch::Contains("FAILED_PRECONDITION") || Catch::Contains("layout_hash"));
  REQUIRE(w0.Wait() == 0);
  REQUIRE(w1.Wait() == 0);
  for (auto& s : cluster.servers) REQUIRE(WEXITSTATUS(s->Signal(SIGTERM)) == 0);
}

}  // namespace
}  // namespace shardps::testing
