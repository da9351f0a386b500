// load_client: the load benchmark's clients (bench/load starts the server).
// --threads client threads, each a worker of an async job with its own
// tensor, push then pull for --seconds: most threads small tensors
// (--small_kb), --large_threads of them large ones (--large_mb). First, as
// the same-run baseline, one thread of each size alone for
// --baseline_seconds. Meanwhile a separate session sends a heartbeat every
// 100 ms and times the answers, and the server's RSS is sampled every
// second (from /proc/--server_pid/status).
//
// Prints rounds/s, MB/s and p50/p99 round latency per size (and their ratio
// to the baseline), heartbeat latency against the heartbeat interval, and
// the server's RSS after warm-up; writes the RSS samples to --rss_csv.
// Exits 1 if any call failed.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/metrics_http.h"
#include "proto/shardps.grpc.pb.h"
#include "client/ps_client.h"

ABSL_FLAG(std::string, server, "", "host:port of the one server (an async job of --threads + 1 workers).");
ABSL_FLAG(int, server_pid, 0, "The server's pid, to sample its RSS (0: not sampled).");
ABSL_FLAG(int, metrics_port, 0, "The server's metrics port on 127.0.0.1, to sample its heap in use (0: not sampled).");
ABSL_FLAG(int, threads, 64, "Client threads under load.");
ABSL_FLAG(int, large_threads, 8, "Of them, threads that push and pull the large tensor.");
ABSL_FLAG(int, small_kb, 4, "Small tensor size in KB (1024 bytes).");
ABSL_FLAG(int, large_mb, 4, "Large tensor size in MB (2^20 bytes).");
ABSL_FLAG(int, seconds, 60, "Seconds under load.");
ABSL_FLAG(int, baseline_seconds, 5, "Seconds of each size alone first (0: no baseline).");
ABSL_FLAG(int, warmup_seconds, 10, "RSS samples before this are the warm-up.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(2), "The job's heartbeat interval.");
ABSL_FLAG(std::string, rss_csv, "", "Write 'second,rss_mb,heap_mb' samples here.");

namespace shardps {
namespace {

struct Latencies {
  absl::Mutex mu;
  std::vector<double> small_ms, large_ms;
  std::atomic<int64_t> errors{0};
  std::string first_error;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int64_t ServerRssKb(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    long long kb = 0;
    if (sscanf(line.c_str(), "VmRSS: %lld kB", &kb) == 1) return kb;
  }
  return 0;
}

// shardps_heap_bytes from the server's /metrics, in MB; 0 when unknown.
double ServerHeapMb(int port) {
  const std::string page = ScrapeLoopbackMetrics(port);
  const size_t at = page.find("shardps_heap_bytes{");
  if (at == std::string::npos) return 0;
  return std::stod(page.substr(page.find("} ", at) + 2)) / (1 << 20);
}

// One worker: pushes then pulls its tensor until `stop`, timing each
// round, from step *step on (a rank that ran in the baseline goes on where
// it stopped: an async server refuses a step a worker already pushed).
void Worker(const ClientOptions& base, int rank, bool large, const std::atomic<bool>& stop, int64_t* next_step,
            Latencies& out) {
  ClientOptions o = base;
  o.rank = rank;
  auto client = PsClient::Connect(o);
  absl::Status s = client.status();
  if (s.ok()) s = (*client)->Register().status();
  int64_t& step = *next_step;
  const int64_t n = base.layout.tensors[rank].NumElements();
  std::vector<float> grad(n, 1e-9f), weights(n);
  std::vector<double> ms;
  for (; s.ok() && !stop; ++step) {
    const absl::Time t0 = absl::Now();
    s = (*client)->Push(step, {{static_cast<uint32_t>(rank), grad.data()}});
    if (s.ok()) s = (*client)->Pull(step + 1, {{static_cast<uint32_t>(rank), weights.data()}});
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  absl::MutexLock lock(&out.mu);
  auto& into = large ? out.large_ms : out.small_ms;
  into.insert(into.end(), ms.begin(), ms.end());
  if (!s.ok() && out.errors.fetch_add(1) == 0) out.first_error = absl::StrCat("worker ", rank, ": ", s.ToString());
}

// Runs `ranks` workers for `seconds`; returns their latencies. `steps`
// holds each rank's next step.
void RunWorkers(const ClientOptions& base, const std::vector<std::pair<int, bool>>& ranks, int seconds,
                std::vector<int64_t>& steps, Latencies& out) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (auto [rank, large] : ranks) {
    threads.emplace_back([&, rank = rank, large = large] { Worker(base, rank, large, stop, &steps[rank], out); });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
}

// Times a heartbeat every 100 ms from a session of its own until `stop`.
std::vector<double> TimeHeartbeats(const ClientOptions& base, int rank, const std::atomic<bool>& stop) {
  auto stub = wire::ParameterService::NewStub(grpc::CreateChannel(base.servers[0], grpc::InsecureChannelCredentials()));
  wire::RegisterRequest reg;
  reg.set_rank(rank);
  JobView view = base.job;
  view.layout_hash = LayoutHash(base.layout);
  *reg.mutable_view() = JobViewToProto(view);
  wire::RegisterResponse session;
  grpc::ClientContext ctx;
  std::vector<double> ms;
  if (!stub->Register(&ctx, reg, &session).ok()) return ms;
  while (!stop) {
    wire::HeartbeatRequest req;
    req.set_session_id(session.session_id());
    wire::HeartbeatResponse resp;
    grpc::ClientContext hb;
    const absl::Time t0 = absl::Now();
    const bool ok = stub->Heartbeat(&hb, req, &resp).ok();
    ms.push_back(ok ? absl::ToDoubleMilliseconds(absl::Now() - t0) : 1e9);
    absl::SleepFor(absl::Milliseconds(100));
  }
  return ms;
}

struct Memory {
  int second;
  double rss_mb, heap_mb;
};

// The server's memory after warm-up, to stdout and --rss_csv.
void ReportMemory(const std::vector<Memory>& samples) {
  const size_t warm = std::min(samples.size(), static_cast<size_t>(absl::GetFlag(FLAGS_warmup_seconds)));
  auto range = [&](double Memory::*field, const char* what) {
    double lo = 1e18, hi = 0;
    for (size_t i = warm; i < samples.size(); ++i) lo = std::min(lo, samples[i].*field), hi = std::max(hi, samples[i].*field);
    printf("server %s after %zu s of warm-up: %.1f MB, at the end %.1f MB; min %.1f, max %.1f (%.1f%% spread)\n", what,
           warm, samples[warm].*field, samples.back().*field, lo, hi, hi > 0 ? 100.0 * (hi - lo) / hi : 0.0);
  };
  if (warm < samples.size()) {
    range(&Memory::rss_mb, "RSS");
    if (absl::GetFlag(FLAGS_metrics_port) > 0) range(&Memory::heap_mb, "heap in use");
  }
  if (!absl::GetFlag(FLAGS_rss_csv).empty()) {
    std::ofstream csv(absl::GetFlag(FLAGS_rss_csv));
    csv << "second,rss_mb,heap_mb\n";
    for (const Memory& m : samples) csv << m.second << "," << m.rss_mb << "," << m.heap_mb << "\n";
  }
}

void PrintSize(const char* name, int64_t bytes, const std::vector<double>& ms, const std::vector<double>& base_ms,
               int seconds, int threads) {
  const double rounds = static_cast<double>(ms.size()) / seconds;
  const double p50 = Percentile(ms, 0.5), p99 = Percentile(ms, 0.99), base_p50 = Percentile(base_ms, 0.5);
  printf("%-6s %8d %10.0f %10.1f %9.2f %9.2f %12.2f %14.2f\n", name, threads, rounds, rounds * 2 * bytes / 1e6, p50,
         p99, base_p50, base_p50 > 0 ? p50 / base_p50 : 0.0);
}

// An async job of one server and threads + 1 workers (the last rank times
// heartbeats), each rank with a tensor of its own.
ClientOptions JobOf(int threads, int large, int64_t small_bytes, int64_t large_bytes) {
  ClientOptions base;
  base.servers = {absl::GetFlag(FLAGS_server)};
  base.job.mode = Mode::kAsync;
  base.job.num_servers = 1;
  base.job.num_workers = threads + 1;
  base.channels_per_server = 1;
  for (int r = 0; r <= threads; ++r) {
    base.layout.tensors.push_back({absl::StrCat("t", r), {(r < large ? large_bytes : small_bytes) / 4}});
  }
  return base;
}

absl::Status InitialiseAll(const ClientOptions& base) {
  auto init = PsClient::Connect(base);
  if (!init.ok()) return init.status();
  if (absl::Status s = (*init)->Register().status(); !s.ok()) return s;
  std::vector<std::vector<float>> w;
  for (const TensorSpec& t : base.layout.tensors) w.emplace_back(t.NumElements(), 0.5f);
  return (*init)->Init(w);
}

}  // namespace

int Run() {
  const int threads = absl::GetFlag(FLAGS_threads), large = absl::GetFlag(FLAGS_large_threads);
  const int64_t small_bytes = absl::GetFlag(FLAGS_small_kb) * 1024LL, large_bytes = absl::GetFlag(FLAGS_large_mb) << 20;
  const ClientOptions base = JobOf(threads, large, small_bytes, large_bytes);
  if (absl::Status s = InitialiseAll(base); !s.ok()) {
    fprintf(stderr, "load_client: %s\n", s.ToString().c_str());
    return 1;
  }
  Latencies baseline, load;
  std::vector<int64_t> steps(threads + 1, 0);
  if (absl::GetFlag(FLAGS_baseline_seconds) > 0) {
    RunWorkers(base, {{0, true}}, absl::GetFlag(FLAGS_baseline_seconds), steps, baseline);
    RunWorkers(base, {{large, false}}, absl::GetFlag(FLAGS_baseline_seconds), steps, baseline);
  }
  std::atomic<bool> stop{false};
  std::vector<double> heartbeat_ms;
  std::thread heartbeats([&] { heartbeat_ms = TimeHeartbeats(base, threads, stop); });
  std::vector<Memory> rss;
  std::thread sampler([&] {
    for (int s = 0; !stop && absl::GetFlag(FLAGS_server_pid) > 0; ++s) {
      const int port = absl::GetFlag(FLAGS_metrics_port);
      rss.push_back({s, ServerRssKb(absl::GetFlag(FLAGS_server_pid)) / 1024.0, port > 0 ? ServerHeapMb(port) : 0});
      absl::SleepFor(absl::Seconds(1));
    }
  });
  std::vector<std::pair<int, bool>> ranks;
  for (int r = 0; r < threads; ++r) ranks.emplace_back(r, r < large);
  RunWorkers(base, ranks, absl::GetFlag(FLAGS_seconds), steps, load);
  stop = true;
  heartbeats.join();
  sampler.join();

  const int seconds = absl::GetFlag(FLAGS_seconds);
  printf("%-6s %8s %10s %10s %9s %9s %12s %14s\n", "size", "threads", "rounds/s", "MB/s", "p50_ms", "p99_ms",
         "alone_p50_ms", "p50_vs_alone");
  PrintSize(absl::StrCat(absl::GetFlag(FLAGS_small_kb), "KB").c_str(), small_bytes, load.small_ms, baseline.small_ms,
            seconds, threads - large);
  PrintSize(absl::StrCat(absl::GetFlag(FLAGS_large_mb), "MB").c_str(), large_bytes, load.large_ms, baseline.large_ms,
            seconds, large);
  const double interval_ms = absl::ToDoubleMilliseconds(absl::GetFlag(FLAGS_heartbeat_interval));
  const double hb_max = heartbeat_ms.empty() ? 0 : *std::max_element(heartbeat_ms.begin(), heartbeat_ms.end());
  printf("heartbeats: %zu, p50 %.2f ms, p99 %.2f ms, max %.2f ms; interval %.0f ms: %s\n", heartbeat_ms.size(),
         Percentile(heartbeat_ms, 0.5), Percentile(heartbeat_ms, 0.99), hb_max, interval_ms,
         hb_max < interval_ms ? "every one answered within it" : "SOME ANSWERED LATE");
  ReportMemory(rss);
  const int64_t errors = load.errors + baseline.errors;
  printf("errors: %lld%s\n", static_cast<long long>(errors), errors ? (" (first: " + load.first_error + baseline.first_error + ")").c_str() : "");
  return errors == 0 ? 0 : 1;
}

}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
