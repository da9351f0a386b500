// push_pull: the wire benchmark's client. N client threads, each a worker of
// an async job, push then pull one dense float32 tensor per round against
// the servers given; per tensor size it prints the median ms per round and
// GB/s of values (pushed plus pulled bytes over the round's time, summed
// over clients), and in the same run one loopback TCP stream's GB/s and our
// fraction of it. bench/push_pull_bench starts the servers.
//
//   push_pull --servers=127.0.0.1:7000 --clients=1 --sizes_mb=4,16,64
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
#include "absl/time/clock.h"
#include "bench/tcp_stream.h"
#include "common/malloc_tuning.h"
#include "common/wire_dtype.h"
#include "worker/ps_client.h"

ABSL_FLAG(std::string, servers, "", "Comma-separated host:port of the servers (an async job of --clients workers).");
ABSL_FLAG(int, clients, 1, "Client threads, one worker rank each; must equal the servers' --num_workers.");
ABSL_FLAG(std::string, sizes_mb, "4,16,64", "Tensor sizes in MB (10^6 bytes, rounded to floats).");
ABSL_FLAG(int, repeats, 20, "Timed rounds per size; the median is reported.");
ABSL_FLAG(int, warmup, 3, "Untimed rounds per size first.");
ABSL_FLAG(int64_t, partition_bytes, shardps::kDefaultPartitionBytes, "Must match the servers.");
ABSL_FLAG(int, channels_per_server, 2, "gRPC channels (TCP connections) per server per client.");
ABSL_FLAG(std::string, wire_dtype, "float32", "Encoding on the wire: float32 or bfloat16 (as ps_worker).");
ABSL_FLAG(int64_t, tcp_baseline_mb, 4000, "MB sent over one loopback TCP stream for the baseline (0: skip).");

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

int Run() {
  absl::StatusOr<std::vector<int64_t>> sizes = ParseSizes();
  if (!sizes.ok()) {
    fprintf(stderr, "push_pull: %s\n", std::string(sizes.status().message()).c_str());
    return 2;
  }
  ClientOptions base;
  base.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (base.servers.empty()) {
    fprintf(stderr, "push_pull: --servers is empty\n");
    return 2;
  }
  const int clients = absl::GetFlag(FLAGS_clients);
  base.job.mode = Mode::kAsync;
  base.job.num_servers = static_cast<int>(base.servers.size());
  base.job.num_workers = clients;
  base.job.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  base.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  absl::StatusOr<wire::DType> wire_dtype = ParseWireDType(absl::GetFlag(FLAGS_wire_dtype));
  if (!wire_dtype.ok()) {
    fprintf(stderr, "push_pull: %s\n", std::string(wire_dtype.status().message()).c_str());
    return 2;
  }
  base.wire_dtype = *wire_dtype;
  for (size_t i = 0; i < sizes->size(); ++i) {
    base.layout.tensors.push_back({absl::StrCat("t", i), {(*sizes)[i]}});
  }

  double tcp = 0;
  if (absl::GetFlag(FLAGS_tcp_baseline_mb) > 0) {
    absl::StatusOr<double> b = LoopbackTcpBytesPerSecond(absl::GetFlag(FLAGS_tcp_baseline_mb) * 1000000);
    if (!b.ok()) {
      fprintf(stderr, "push_pull: baseline: %s\n", std::string(b.status().message()).c_str());
      return 1;
    }
    tcp = *b;
    printf("baseline: one loopback TCP stream: %.2f GB/s\n", tcp / 1e9);
  }

  const int repeats = absl::GetFlag(FLAGS_repeats), warmup = absl::GetFlag(FLAGS_warmup);
  // per_client[c][size] = the client's median ms per round.
  std::vector<std::vector<double>> per_client(clients, std::vector<double>(sizes->size()));
  std::vector<std::vector<double>> push_ms(clients, std::vector<double>(sizes->size()));
  std::vector<absl::Status> errors(clients);
  // Clients start each size together.
  std::vector<std::unique_ptr<absl::Barrier>> barriers;
  for (size_t i = 0; i < sizes->size(); ++i) barriers.push_back(std::make_unique<absl::Barrier>(clients));

  auto client_main = [&](int rank) {
    ClientOptions o = base;
    o.rank = rank;
    absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(o);
    absl::Status s = client.status();
    if (s.ok()) s = (*client)->Register().status();
    if (s.ok()) {
      std::vector<std::vector<float>> init;
      for (int64_t n : *sizes) init.emplace_back(n, 0.5f);
      s = (*client)->Init(init);
    }
    for (size_t i = 0; i < sizes->size(); ++i) {
      std::vector<float> grads((*sizes)[i], 1e-9f), out((*sizes)[i]);
      std::vector<double> ms, push;
      barriers[i]->Block();
      for (int r = 0; s.ok() && r < warmup + repeats; ++r) {
        const absl::Time t0 = absl::Now();
        s = (*client)->Push(r, {{static_cast<uint32_t>(i), grads.data()}});
        const absl::Time t1 = absl::Now();
        if (s.ok()) s = (*client)->Pull(r, {{static_cast<uint32_t>(i), out.data()}});
        if (r >= warmup) {
          ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
          push.push_back(absl::ToDoubleMilliseconds(t1 - t0));
        }
      }
      if (!s.ok()) break;
      std::sort(ms.begin(), ms.end());
      std::sort(push.begin(), push.end());
      per_client[rank][i] = ms[ms.size() / 2];
      push_ms[rank][i] = push[push.size() / 2];
    }
    errors[rank] = s;
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(client_main, c);
  for (auto& t : threads) t.join();
  for (int c = 0; c < clients; ++c) {
    if (!errors[c].ok()) {
      fprintf(stderr, "push_pull: client %d: %s\n", c, std::string(errors[c].message()).c_str());
      return 1;
    }
  }
  printf("%-8s %8s %10s %10s %14s %12s\n", "size_MB", "clients", "ms/round", "push_ms", "GB/s_values", "of_TCP");
  for (size_t i = 0; i < sizes->size(); ++i) {
    std::vector<double> ms;
    for (int c = 0; c < clients; ++c) ms.push_back(per_client[c][i]);
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double gbps = clients * 2.0 * (*sizes)[i] * 4 / (median / 1e3) / 1e9;
    printf("%-8.0f %8d %10.2f %10.2f %14.2f %12.2f\n", (*sizes)[i] * 4 / 1e6, clients, median, push_ms[0][i], gbps,
           tcp > 0 ? gbps * 1e9 / tcp : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  absl::SetProgramUsageMessage("push_pull: push+pull throughput against running ShardPS servers.");
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
