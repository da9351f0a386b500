// push_pull: the wire benchmark's client. N client threads, each a worker of
// an async job, push then pull one dense float32 tensor per round (or
// --tensors=K tensors, each pulled when its own push is answered; with
// --pull_with_push one PushThenPull, the pull leaving with the push) against
// the servers given; per tensor size it prints the median ms per round, GB/s
// of values (pushed plus pulled bytes over the round's time, summed over
// clients) and the machine's CPU use. Baselines in the same run (the machine
// is shared): one memcpy, one loopback TCP stream, and per size a bare-socket
// push+pull of the same bytes over as many connections; we print our fraction
// of the last two. With --compare_servers it measures a second job's servers
// too, in alternating blocks of rounds, and prints the second's GB/s over the
// first's per size: a ratio the machine's drift between two runs cannot
// skew. bench/push_pull_bench starts the servers.
//
//   push_pull --servers=127.0.0.1:7000 --clients=1 --sizes_mb=4,16,64
//   push_pull --servers=A0,A1 --compare_servers=B0,B1 --compare_replicas=2
#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/machine_cpu.h"
#include "bench/baselines.h"
#include "common/job_view.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/wire_dtype.h"
#include "client/ps_client.h"

ABSL_FLAG(std::string, servers, "", "Comma-separated host:port of the servers (a job of --clients workers).");
ABSL_FLAG(std::string, mode, "async",
          "The servers' --mode: async, or sync (each round a step: every client's push summed, then pulled).");
ABSL_FLAG(int, clients, 1, "Client threads, one worker rank each; must equal the servers' --num_workers.");
ABSL_FLAG(std::string, sizes_mb, "4,16,64", "Tensor sizes in MB (10^6 bytes, rounded to floats).");
ABSL_FLAG(int, tensors, 1,
          "Split each size into this many tensors of equal size; each is pushed then pulled on its own, all in "
          "flight at once (as a worker's layers are). 1: one tensor, a strict push then pull.");
ABSL_FLAG(bool, pull_with_push, false,
          "Async, one tensor: each round is one PushThenPull whose pull leaves with the push and is answered once "
          "that push is applied (ps_worker's --pull_with_push; ps-lite's ZPushPull), chunk by chunk; else a "
          "push, then a pull.");
ABSL_FLAG(int, repeats, 20, "Timed rounds per size; the median is reported.");
ABSL_FLAG(int, warmup, 3, "Untimed rounds per size first.");
ABSL_FLAG(int64_t, partition_bytes, shardps::kDefaultPartitionBytes, "Must match the servers.");
ABSL_FLAG(int, replicas, 1, "Copies of every key (--replicas); must match the servers.");
ABSL_FLAG(int, channels_per_server, 2, "gRPC channels (TCP connections) per server per client.");
ABSL_FLAG(int64_t, push_request_bytes, shardps::kDefaultPushRequestBytes,
          "The most bytes of one server's chunks in one push (0: a partition's).");
ABSL_FLAG(int64_t, fetch_request_bytes, 0, "The most bytes of one server's chunks in one fetch (0: a partition's).");
ABSL_FLAG(int64_t, in_flight_bytes, 0,
          "Bytes of pushes (and of pulls) in flight at once, as ps_worker's flag: 0 automatic, negative no limit.");
ABSL_FLAG(std::string, wire_dtype, "float32", "Encoding on the wire: float32 or bfloat16 (as ps_worker).");
ABSL_FLAG(int64_t, tcp_baseline_mb, 4000, "MB sent over one loopback TCP stream for the baseline (0: skip it and the memcpy one).");
ABSL_FLAG(std::string, tls_ca, "", "TLS: the CA of the servers' certificates (as ps_worker's --tls_ca).");
ABSL_FLAG(std::string, auth_token_file, "", "The job token file (as ps_worker's --auth_token_file).");
ABSL_FLAG(std::string, compare_servers, "",
          "A second job's servers, measured in alternation with --servers (blocks of --block rounds); prints "
          "the second's GB/s over the first's per size.");
ABSL_FLAG(int, compare_replicas, 1, "The second job's --replicas (the first's is --replicas).");
ABSL_FLAG(int, block, 5, "With --compare_servers: rounds on one job before the next block on the other.");
ABSL_FLAG(bool, socket_baseline, true,
          "Per size, also time a bare-socket push+pull of the same bytes over the same number of connections "
          "(clients x servers x channels_per_server): the kernel's copies alone, no gRPC, apply or copy-out.");

namespace shardps {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseSizes() {
  std::vector<int64_t> floats;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',', absl::SkipEmpty())) {
    double mb = 0;
    if (!absl::SimpleAtod(s, &mb) || mb <= 0) return absl::InvalidArgumentError(absl::StrCat("bad size '", s, "'"));
    floats.push_back(static_cast<int64_t>(mb * 1e6 / 4));
  }
  return floats;
}

// One round of one tensor as a PushThenPull (--pull_with_push): the pull
// leaves with the push, and each chunk's weights come back once its push is
// applied. `pushed` is when the push was answered.
absl::Status FusedRound(PsClient& client, int64_t step, uint32_t tensor, const float* grads, float* out,
                        absl::Time& pushed) {
  absl::Mutex mu;
  absl::Status first_error;
  int left = 2;
  auto record = [&](const absl::Status& s, absl::Time* at) {
    absl::MutexLock lock(&mu);
    if (!s.ok() && first_error.ok()) first_error = s;
    if (at != nullptr) *at = absl::Now();
    --left;
  };
  client.PushThenPull(
      step, {{tensor, grads}}, {{tensor, out}}, [&](absl::Status s) { record(s, &pushed); },
      [&](absl::Status s) { record(s, nullptr); });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(+[](int* n) { return *n == 0; }, &left));
  return first_error;
}

// One round: tensors [first, first + count) of `per_tensor` floats each,
// laid end to end in `grads` and `out`. With one tensor, a push then a
// pull; with several, each tensor's pull leaves when its own push is
// answered, all tensors at once. `pushed` is when the last push was answered.
// In sync the pull is of step + 1, the version the step's summed pushes
// make; in async of `step`, which any version answers.
absl::Status Round(PsClient& client, Mode mode, int64_t step, uint32_t first, int count, const float* grads,
                   float* out, int64_t per_tensor, absl::Time& pushed) {
  const int64_t pull_step = mode == Mode::kSync ? step + 1 : step;
  if (count == 1 && absl::GetFlag(FLAGS_pull_with_push)) return FusedRound(client, step, first, grads, out, pushed);
  if (count == 1) {
    absl::Status s = client.Push(step, {{first, grads}});
    pushed = absl::Now();
    return s.ok() ? client.Pull(pull_step, {{first, out}}) : s;
  }
  absl::Mutex mu;
  absl::Status first_error;
  int pushes_left = count, pulls_left = count;
  // Counts one answer down in `left`; stamps `*last` when it was the last.
  auto record = [&](const absl::Status& s, int& left, absl::Time* last) {
    absl::MutexLock lock(&mu);
    if (!s.ok() && first_error.ok()) first_error = s;
    if (--left == 0 && last != nullptr) *last = absl::Now();
  };
  for (int t = 0; t < count; ++t) {
    const uint32_t tensor = first + t;
    float* into = out + t * per_tensor;
    client.PushAsync(step, {{tensor, grads + t * per_tensor}}, [&, tensor, into](absl::Status s) {
      record(s, pushes_left, &pushed);
      if (!s.ok()) return record(s, pulls_left, nullptr);
      client.PullAsync(pull_step, {{tensor, into}}, [&](absl::Status p) { record(p, pulls_left, nullptr); });
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(+[](int* left) { return *left == 0; }, &pulls_left));
  return first_error;
}

// One job's servers and what its rounds measured: per client and size, the
// median ms per round and per push; per size, the machine's CPU over client
// 0's timed rounds.
struct Job {
  ClientOptions options;
  std::vector<std::vector<double>> ms, push_ms;
  std::vector<CpuSample> cpu_busy;  // summed over the timed blocks: busy and total jiffies
};

absl::StatusOr<std::unique_ptr<PsClient>> StartClient(ClientOptions o, const std::vector<int64_t>& sizes,
                                                      int tensors) {
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(o);
  if (!client.ok()) return client;
  if (absl::Status s = (*client)->Register().status(); !s.ok()) return s;
  std::vector<std::vector<float>> init;
  for (int64_t n : sizes) {
    for (int t = 0; t < tensors; ++t) init.emplace_back(n / tensors, 0.5f);
  }
  if (absl::Status s = (*client)->Init(init); !s.ok()) return s;
  return client;
}

// One client's rounds of size `i` on every job: warm-up then timed rounds,
// in blocks of `block` rounds per job in turn.
absl::Status MeasureSize(int rank, size_t i, int64_t floats, int tensors, int block,
                         const std::vector<std::unique_ptr<PsClient>>& clients, std::vector<Job>& jobs) {
  const int repeats = absl::GetFlag(FLAGS_repeats), warmup = absl::GetFlag(FLAGS_warmup);
  const int64_t per_tensor = floats / tensors;
  std::vector<float> grads(per_tensor * tensors, 1e-9f), out(per_tensor * tensors);
  std::vector<std::vector<double>> ms(jobs.size()), push(jobs.size());
  for (int first = 0; first < warmup + repeats; first += block) {
    const int last = std::min(first + block, warmup + repeats);
    for (size_t j = 0; j < jobs.size(); ++j) {
      CpuSample before;  // from the block's first timed round
      for (int r = first; r < last; ++r) {
        if (r == std::max(first, warmup)) before = SampleMachineCpu();
        const absl::Time t0 = absl::Now();
        absl::Time pushed;
        absl::Status s = Round(*clients[j], jobs[j].options.job.mode, r, static_cast<uint32_t>(i * tensors), tensors,
                               grads.data(), out.data(), per_tensor, pushed);
        if (!s.ok()) return s;
        if (r < warmup) continue;
        ms[j].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        push[j].push_back(absl::ToDoubleMilliseconds(pushed - t0));
      }
      if (rank != 0 || last <= warmup) continue;
      const CpuSample after = SampleMachineCpu();
      jobs[j].cpu_busy[i].busy += after.busy - before.busy;
      jobs[j].cpu_busy[i].total += after.total - before.total;
    }
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::sort(ms[j].begin(), ms[j].end());
    std::sort(push[j].begin(), push[j].end());
    jobs[j].ms[rank][i] = ms[j][ms[j].size() / 2];
    jobs[j].push_ms[rank][i] = push[j][push[j].size() / 2];
  }
  return absl::OkStatus();
}

// Every client thread's rounds on every job; the first error, if any.
absl::Status MeasureJobs(std::vector<Job>& jobs, const std::vector<int64_t>& sizes, int tensors) {
  const int clients = jobs[0].options.job.num_workers;
  for (Job& job : jobs) {
    job.ms.assign(clients, std::vector<double>(sizes.size()));
    job.push_ms = job.ms;
    job.cpu_busy.assign(sizes.size(), CpuSample{});
  }
  const int block = absl::GetFlag(FLAGS_compare_servers).empty() ? absl::GetFlag(FLAGS_warmup) +
                                                                       absl::GetFlag(FLAGS_repeats)
                                                                 : std::max(1, absl::GetFlag(FLAGS_block));
  std::vector<absl::Status> errors(clients);
  // Clients start each size together.
  std::vector<std::unique_ptr<absl::Barrier>> barriers;
  for (size_t i = 0; i < sizes.size(); ++i) barriers.push_back(std::make_unique<absl::Barrier>(clients));
  auto client_main = [&](int rank) {
    std::vector<std::unique_ptr<PsClient>> connected;
    absl::Status s;
    for (const Job& job : jobs) {
      ClientOptions o = job.options;
      o.rank = rank;
      absl::StatusOr<std::unique_ptr<PsClient>> c = StartClient(o, sizes, tensors);
      if (s.ok()) s = c.status();
      if (c.ok()) connected.push_back(*std::move(c));
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      barriers[i]->Block();  // even after an error: the others wait here
      if (s.ok()) s = MeasureSize(rank, i, sizes[i], tensors, block, connected, jobs);
    }
    errors[rank] = s;
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(client_main, c);
  for (auto& t : threads) t.join();
  for (int c = 0; c < clients; ++c) {
    if (!errors[c].ok()) return absl::Status(errors[c].code(), absl::StrCat("client ", c, ": ", errors[c].message()));
  }
  return absl::OkStatus();
}

// The median client's ms per round of size i.
double MedianMs(const Job& job, size_t i) {
  std::vector<double> ms;
  for (const std::vector<double>& client : job.ms) ms.push_back(client[i]);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Values pushed plus pulled per second over the median client's round.
double GigabytesPerSecond(const Job& job, size_t i, int64_t floats) {
  return job.ms.size() * 2.0 * floats * 4 / (MedianMs(job, i) / 1e3) / 1e9;
}

absl::Status PrintTable(const Job& job, const std::vector<int64_t>& sizes, int tensors, double tcp) {
  const int clients = static_cast<int>(job.ms.size());
  const int connections =
      clients * static_cast<int>(job.options.servers.size()) * std::max(1, job.options.channels_per_server);
  printf("%-8s %8s %8s %10s %10s %12s %8s %12s %11s %9s\n", "size_MB", "clients", "tensors", "ms/round", "push_ms",
         "GB/s_values", "of_TCP", "sockets_GB/s", "of_sockets", "cpu_busy");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t floats = sizes[i] / tensors * tensors;
    const double gbps = GigabytesPerSecond(job, i, floats);
    const double round_bytes = clients * 2.0 * floats * 4;  // pushed plus pulled
    double sockets = 0;
    if (absl::GetFlag(FLAGS_socket_baseline)) {
      absl::StatusOr<double> b =
          LoopbackPushPullSeconds(static_cast<int64_t>(round_bytes / 2), connections, absl::GetFlag(FLAGS_repeats));
      if (!b.ok()) return absl::Status(b.status().code(), absl::StrCat("socket baseline: ", b.status().message()));
      sockets = round_bytes / *b / 1e9;
    }
    const CpuSample& cpu = job.cpu_busy[i];
    printf("%-8.0f %8d %8d %10.2f %10.2f %12.2f %8.2f %12.2f %11.2f %9.2f\n", sizes[i] * 4 / 1e6, clients, tensors,
           MedianMs(job, i), job.push_ms[0][i], gbps, tcp > 0 ? gbps * 1e9 / tcp : 0.0, sockets,
           sockets > 0 ? gbps / sockets : 0.0, cpu.total > 0 ? cpu.busy / cpu.total : 0.0);
  }
  return absl::OkStatus();
}

// The second job's GB/s over the first's, per size.
void PrintComparison(const std::vector<Job>& jobs, const std::vector<int64_t>& sizes, int tensors) {
  printf("--compare_servers (replicas %d) against --servers (replicas %d), blocks of %d rounds alternated:\n",
         jobs[1].options.job.replicas, jobs[0].options.job.replicas, absl::GetFlag(FLAGS_block));
  printf("%-8s %12s %12s %8s\n", "size_MB", "first_GB/s", "second_GB/s", "ratio");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t floats = sizes[i] / tensors * tensors;
    const double a = GigabytesPerSecond(jobs[0], i, floats), b = GigabytesPerSecond(jobs[1], i, floats);
    printf("%-8.0f %12.2f %12.2f %8.2f\n", sizes[i] * 4 / 1e6, a, b, b / a);
  }
}

int Fail(const absl::Status& s) {
  fprintf(stderr, "push_pull: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<ClientOptions> BaseOptions(const std::vector<int64_t>& sizes, int tensors) {
  ClientOptions base;
  base.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (base.servers.empty()) return absl::InvalidArgumentError("--servers is empty");
  absl::StatusOr<Mode> mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  if (*mode == Mode::kSsp) return absl::InvalidArgumentError("--mode: async or sync (ssp rounds would time staleness)");
  base.job.mode = *mode;
  base.job.num_servers = static_cast<int>(base.servers.size());
  base.job.num_workers = absl::GetFlag(FLAGS_clients);
  base.job.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  base.job.replicas = absl::GetFlag(FLAGS_replicas);
  base.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  base.in_flight_bytes = absl::GetFlag(FLAGS_in_flight_bytes);
  base.push_request_bytes = absl::GetFlag(FLAGS_push_request_bytes);
  base.fetch_request_bytes = absl::GetFlag(FLAGS_fetch_request_bytes);
  absl::StatusOr<wire::DType> wire_dtype = ParseWireDType(absl::GetFlag(FLAGS_wire_dtype));
  if (!wire_dtype.ok()) return wire_dtype.status();
  base.wire_dtype = *wire_dtype;
  base.pull_with_push = absl::GetFlag(FLAGS_pull_with_push);
  if (base.pull_with_push && (*mode != Mode::kAsync || tensors != 1)) {
    return absl::InvalidArgumentError("--pull_with_push: async and one tensor only");
  }
  base.tls.ca = absl::GetFlag(FLAGS_tls_ca);
  absl::StatusOr<std::string> token = ReadAuthToken(absl::GetFlag(FLAGS_auth_token_file));
  if (!token.ok()) return token.status();
  base.auth_token = *token;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int t = 0; t < tensors; ++t) base.layout.tensors.push_back({absl::StrCat("t", i, ".", t), {sizes[i] / tensors}});
  }
  return base;
}

int Run() {
  absl::StatusOr<std::vector<int64_t>> sizes = ParseSizes();
  if (!sizes.ok()) return Fail(sizes.status());
  const int tensors = absl::GetFlag(FLAGS_tensors);
  if (tensors < 1) return Fail(absl::InvalidArgumentError("--tensors must be >= 1"));
  if (absl::GetFlag(FLAGS_repeats) < 1 || absl::GetFlag(FLAGS_warmup) < 0) {
    return Fail(absl::InvalidArgumentError("--repeats must be >= 1 and --warmup >= 0"));
  }
  absl::StatusOr<ClientOptions> base = BaseOptions(*sizes, tensors);
  if (!base.ok()) return Fail(base.status());
  std::vector<Job> jobs(1);
  jobs[0].options = *base;
  if (!absl::GetFlag(FLAGS_compare_servers).empty()) {
    Job& second = jobs.emplace_back();
    second.options = *base;
    second.options.servers = absl::StrSplit(absl::GetFlag(FLAGS_compare_servers), ',', absl::SkipEmpty());
    second.options.job.num_servers = static_cast<int>(second.options.servers.size());
    second.options.job.replicas = absl::GetFlag(FLAGS_compare_replicas);
  }

  double tcp = 0;
  if (absl::GetFlag(FLAGS_tcp_baseline_mb) > 0) {
    absl::StatusOr<double> b = LoopbackTcpBytesPerSecond(absl::GetFlag(FLAGS_tcp_baseline_mb) * 1000000);
    if (!b.ok()) return Fail(absl::Status(b.status().code(), absl::StrCat("baseline: ", b.status().message())));
    tcp = *b;
    printf("baseline: one loopback TCP stream: %.2f GB/s; one 64 MB memcpy: %.2f GB/s\n", tcp / 1e9,
           MemcpyBytesPerSecond(64 << 20) / 1e9);
  }
  if (absl::Status s = MeasureJobs(jobs, *sizes, tensors); !s.ok()) return Fail(s);
  for (const Job& job : jobs) {
    if (absl::Status s = PrintTable(job, *sizes, tensors, tcp); !s.ok()) return Fail(s);
  }
  if (jobs.size() == 2) PrintComparison(jobs, *sizes, tensors);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  absl::SetProgramUsageMessage("push_pull: push+pull throughput against running ShardPS servers.");
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
