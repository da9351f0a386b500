// sparse_push_pull: the sparse-row (embedding table) benchmark's client, the
// ShardPS side of the ps-lite peer in ../shared/peers/pslite/sparse_bench.cc.
// One worker of an async job against one running server (bench/sparse_push_pull
// starts it). Two modes:
//
//  --mode=rounds: the peer's workload. Each round draws --batch ids from
//    Zipf(--alpha) over [1, --vocab] (the same generator, seed and 64-bit
//    hashing as the peer), pushes one gradient row per id with PushRows (the
//    client dedups the batch itself and sums repeated ids' rows), then pulls
//    the same ids with PullRows. After --warmup untimed rounds it times
//    --repeat rounds and prints the median round, unique rows pushed plus
//    pulled per second (the peer's figure), and GB/s of row payload (unique
//    rows x dim x 4 bytes x 2 directions over the round's time).
//    --prededup: the ids are deduped and sorted before the timer starts, as
//    the peer does, so the client's own dedup runs on distinct ids.
//  --mode=fill: the memory figure. Pushes --fill_rows distinct ids (hashed
//    as above) in pushes of --fill_batch rows, reading the server's VmRSS
//    (--server_pid) before and after; prints both and bytes per row.
//
//   sparse_push_pull --server=127.0.0.1:7000 --mode=rounds --dim=64 --batch=65536
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/table_spec.h"
#include "common/wire_dtype.h"

ABSL_FLAG(std::string, server, "", "host:port of the one server (an async job of one worker).");
ABSL_FLAG(std::string, mode, "rounds", "rounds (push+pull throughput) or fill (server memory per row).");
ABSL_FLAG(int, dim, 64, "Floats per row (the peer's DIM).");
ABSL_FLAG(int, batch, 65536, "Ids drawn per round, repeats included (the peer's BATCH).");
ABSL_FLAG(int64_t, vocab, 10000000, "Zipf support [1, vocab] before hashing (the peer's VOCAB).");
ABSL_FLAG(double, alpha, 1.05, "Zipf exponent (the peer's ALPHA).");
ABSL_FLAG(int, repeat, 20, "Timed rounds (the peer's REPEAT); the median is reported.");
ABSL_FLAG(int, warmup, 2, "Untimed rounds first (the peer's 2).");
ABSL_FLAG(uint64_t, seed, 42, "Seed of the id draws (the peer's 42).");
ABSL_FLAG(bool, prededup, false, "rounds: dedup and sort each batch before the timer, as the peer does.");
ABSL_FLAG(std::string, optimizer, "sgd", "The table's row optimizer: sgd, adagrad, rowwise_adagrad, lazy_adam.");
ABSL_FLAG(double, lr, 0.01, "The table's learning rate (the peer: w -= 0.01 g).");
ABSL_FLAG(std::string, wire_dtype, "float32", "Encoding on the wire: float32 or bfloat16.");
ABSL_FLAG(int, channels_per_server, 1, "gRPC channels (TCP connections) to the server.");
ABSL_FLAG(int64_t, fill_rows, 5000000, "fill: distinct rows to create.");
ABSL_FLAG(int, fill_batch, 65536, "fill: rows per push.");
ABSL_FLAG(int, server_pid, 0, "fill: the server's pid, for its VmRSS (0: not read).");

namespace shardps {
namespace {

// The peer's Zipf(alpha) over [1, vocab]: the continuous approximation of the
// CDF, inverted. Kept token for token so both draw the same ids.
uint64_t Zipf(std::mt19937_64& rng, double alpha, double vocab) {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  const double a = 1 - alpha;
  const double x = std::pow(u * (std::pow(vocab + 1, a) - 1) + 1, 1 / a);
  return static_cast<uint64_t>(x);
}

// The peer's Spread(): ids hashed over the whole 64-bit key space.
int64_t Spread(uint64_t id) {
  id ^= id >> 33;
  id *= 0xff51afd7ed558ccdULL;
  id ^= id >> 33;
  id *= 0xc4ceb9fe1a85ec53ULL;
  id ^= id >> 33;
  return static_cast<int64_t>(id);
}

// The server's resident set in bytes, from /proc/<pid>/status; -1 if unread.
int64_t VmRssBytes(int pid) {
  FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/status").c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

int Fail(const char* what, const absl::Status& s) {
  fprintf(stderr, "sparse_push_pull: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

int Rounds(PsClient& client, int dim) {
  const int batch = absl::GetFlag(FLAGS_batch), repeat = absl::GetFlag(FLAGS_repeat);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const double vocab = static_cast<double>(absl::GetFlag(FLAGS_vocab)), alpha = absl::GetFlag(FLAGS_alpha);
  const bool prededup = absl::GetFlag(FLAGS_prededup);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<double> ms, push_ms;
  double unique_total = 0;
  std::vector<int64_t> ids, distinct;
  std::vector<float> grads, rows;
  for (int r = 0; r < warmup + repeat; ++r) {
    ids.resize(batch);
    for (int64_t& id : ids) id = Spread(Zipf(rng, alpha, vocab));
    distinct = ids;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    if (prededup) ids = distinct;
    grads.resize(ids.size() * dim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 97) * 0.001f;
    rows.resize(ids.size() * dim);
    const absl::Time t0 = absl::Now();
    absl::Status s = client.PushRows(r, 0, ids.data(), ids.size(), grads.data());
    const absl::Time pushed = absl::Now();
    if (s.ok()) s = client.PullRows(r, 0, ids.data(), ids.size(), rows.data());
    const absl::Time t1 = absl::Now();
    if (!s.ok()) return Fail(absl::StrCat("round ", r).c_str(), s);
    if (r >= warmup) {
      ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
      push_ms.push_back(absl::ToDoubleMilliseconds(pushed - t0));
      unique_total += static_cast<double>(distinct.size());
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(push_ms.begin(), push_ms.end());
  const double median = ms[ms.size() / 2];
  const double unique = unique_total / repeat;
  const double rows_per_s = 2.0 * unique / (median / 1e3);
  printf("shardps_sparse dim %d batch %d unique_rows %.0f ms/round %.2f Mrows/s %.3f GB/s %.3f push_ms %.2f min_ms %.2f max_ms %.2f"
         " wire %s prededup %d\n",
         dim, batch, unique, median, rows_per_s / 1e6, rows_per_s * dim * 4 / 1e9, push_ms[push_ms.size() / 2], ms.front(), ms.back(),
         absl::GetFlag(FLAGS_wire_dtype).c_str(), prededup ? 1 : 0);
  return 0;
}

int Fill(PsClient& client, int dim, const std::string& optimizer) {
  const int64_t total = absl::GetFlag(FLAGS_fill_rows);
  const int per_push = absl::GetFlag(FLAGS_fill_batch);
  const int pid = absl::GetFlag(FLAGS_server_pid);
  const int64_t before = pid > 0 ? VmRssBytes(pid) : -1;
  std::vector<int64_t> ids;
  std::vector<float> grads(static_cast<size_t>(per_push) * dim, 0.001f);
  const absl::Time t0 = absl::Now();
  int64_t step = 0, half = -1, rss_half = -1;
  for (int64_t first = 0; first < total; first += per_push) {
    if (half < 0 && first >= total / 2) {
      half = first;
      rss_half = pid > 0 ? VmRssBytes(pid) : -1;
    }
    const int64_t n = std::min<int64_t>(per_push, total - first);
    ids.resize(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = Spread(static_cast<uint64_t>(first + i));
    absl::Status s = client.PushRows(step++, 0, ids.data(), ids.size(), grads.data());
    if (!s.ok()) return Fail("fill", s);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  const int64_t after = pid > 0 ? VmRssBytes(pid) : -1;
  // The marginal figure (second half of the rows only) leaves out what the
  // first pushes cost once: request buffers that malloc keeps for reuse.
  printf("fill optimizer %s dim %d rows %ld seconds %.1f server_rss_before %ld server_rss_half %ld (at %ld rows)"
         " server_rss_after %ld rss_bytes_per_row %.1f marginal_rss_bytes_per_row %.1f\n",
         optimizer.c_str(), dim, static_cast<long>(total), seconds, static_cast<long>(before),
         static_cast<long>(rss_half), static_cast<long>(half), static_cast<long>(after),
         before >= 0 && after >= 0 ? static_cast<double>(after - before) / total : -1.0,
         rss_half >= 0 && after >= 0 && half < total ? static_cast<double>(after - rss_half) / (total - half) : -1.0);
  return 0;
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "rounds" && mode != "fill") {
    fprintf(stderr, "sparse_push_pull: --mode is '%s'; want rounds or fill\n", mode.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_server).empty()) {
    fprintf(stderr, "sparse_push_pull: --server is empty\n");
    return 2;
  }
  const int dim = absl::GetFlag(FLAGS_dim);
  if (dim < 1 || absl::GetFlag(FLAGS_batch) < 1 || absl::GetFlag(FLAGS_repeat) < 1 ||
      absl::GetFlag(FLAGS_fill_batch) < 1 || absl::GetFlag(FLAGS_vocab) < 1) {
    fprintf(stderr, "sparse_push_pull: --dim, --batch, --repeat, --vocab and --fill_batch must be >= 1\n");
    return 2;
  }
  absl::StatusOr<RowOptimizerKind> optimizer = ParseRowOptimizer(absl::GetFlag(FLAGS_optimizer));
  if (!optimizer.ok()) return Fail("--optimizer", optimizer.status());
  absl::StatusOr<wire::DType> wire_dtype = ParseWireDType(absl::GetFlag(FLAGS_wire_dtype));
  if (!wire_dtype.ok()) return Fail("--wire_dtype", wire_dtype.status());

  ClientOptions o;
  o.servers = {absl::GetFlag(FLAGS_server)};
  o.job.mode = Mode::kAsync;
  o.job.num_servers = 1;
  o.job.num_workers = 1;
  o.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  o.wire_dtype = *wire_dtype;
  o.layout.tensors.push_back({"bias", {1}});  // a layout needs one dense tensor
  TableSpec table;
  table.name = "emb";
  table.dim = dim;
  table.vocab = 0;         // any int64 id: the ids are hashed over 64 bits
  table.init_scale = 0;    // rows start at zero, as the peer's
  table.optimizer = *optimizer;
  table.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.layout.tables.push_back(table);

  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(o);
  if (!client.ok()) return Fail("connect", client.status());
  if (absl::Status s = (*client)->Register().status(); !s.ok()) return Fail("register", s);
  if (absl::Status s = (*client)->Init({{0.0f}}); !s.ok()) return Fail("init", s);
  const int rc = mode == "rounds" ? Rounds(**client, dim) : Fill(**client, dim, absl::GetFlag(FLAGS_optimizer));
  (*client)->Shutdown();
  return rc;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  absl::SetProgramUsageMessage("sparse_push_pull: sparse-row push+pull throughput and table memory of one ShardPS server.");
  absl::ParseCommandLine(argc, argv);
  return shardps::Run();
}
