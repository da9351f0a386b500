// Push coalescing (ClientOptions::coalesce_pushes, client/grpc_transfers.cc)
// over real gRPC on 127.0.0.1: a step's pushes to one server that wait in
// the push window together go as one request, and the servers apply exactly
// what they would have applied one request at a time, in sync and in async;
// a refused request answers each of its callers and changes no key, and
// Shutdown() answers every push, held ones too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "tests/server_process.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// 48 tensors of one 16-byte key each, like a model's many small layers.
constexpr int kTensors = 48;
Layout ManyTensors() {
  Layout layout;
  for (int t = 0; t < kTensors; ++t) layout.tensors.push_back({"t" + std::to_string(t), {4}});
  return layout;
}

// A worker whose window (128 bytes) holds 8 one-key pushes; with coalescing,
// a request carries up to 64 bytes (half the window).
std::unique_ptr<PsClient> Worker(const TestCluster& cluster, int rank, bool coalesce) {
  ClientOptions o = cluster.ClientFor(rank, ManyTensors());
  o.in_flight_bytes = 128;
  o.coalesce_pushes = coalesce;
  return cluster.Worker(o);
}

// Pushes every tensor in its own call, last first (as backward hands them
// over), all at once: the window backs up. OK when every push was.
bool PushLayerByLayer(PsClient& worker, int64_t step, float value, std::vector<std::vector<float>>& grads) {
  for (auto& g : grads) std::fill(g.begin(), g.end(), value);
  absl::BlockingCounter done(kTensors);
  std::atomic<int> failed{0};
  for (int t = kTensors - 1; t >= 0; --t) {
    worker.PushAsync(step, {{static_cast<uint32_t>(t), grads[t].data()}}, [&](absl::Status s) {
      if (!s.ok()) ++failed;
      done.DecrementCount();
    });
  }
  done.Wait();
  return failed == 0;
}

bool PullAllTensors(PsClient& worker, int64_t step, std::vector<std::vector<float>>& w) {
  std::vector<TensorOut> outs;
  for (uint32_t t = 0; t < kTensors; ++t) outs.push_back({t, w[t].data()});
  return worker.Pull(step, std::move(outs)).ok();
}

// An async job on 2 servers whose every push is a whole step, undamped:
// weights stay exact integers.
ServerOptions ExactAsync(int workers) {
  ServerOptions o = SyncOptions(2, workers);
  o.job.mode = Mode::kAsync;
  o.async_lr_scaling = AsyncLrScaling::kNone;
  o.staleness_lr = StalenessLr::kNone;
  return o;
}

int64_t PushRequests(TestCluster& cluster) {
  return cluster.core(0)->Stats().pushes + cluster.core(1)->Stats().pushes;
}

TEST_CASE("sync: coalesced pushes give every worker exactly the mean, in fewer requests", "[coalescing]") {
  constexpr int kWorkers = 2, kSteps = 3;
  const bool coalesce = GENERATE(false, true);
  ServerOptions o = SyncOptions(2, kWorkers);
  TestCluster cluster(o);
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int r = 0; r < kWorkers; ++r) workers.push_back(Worker(cluster, r, coalesce));
  REQUIRE(workers[0]->Init(Zeros(ManyTensors())).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      auto grads = Zeros(ManyTensors()), w = Zeros(ManyTensors());
      float expected = 0;
      for (int step = 0; step < kSteps; ++step) {
        // Gradients 1 and 3: the mean, 2, is exact.
        if (!PushLayerByLayer(*workers[r], step, 1.0f + 2 * r, grads)) ++failures;
        expected -= 2.0f;  // lr = 1
        if (!PullAllTensors(*workers[r], step + 1, w) || !AllEqual(w, expected)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  REQUIRE(cluster.core(0)->Stats().min_version == kSteps);
  REQUIRE(cluster.core(1)->Stats().max_version == kSteps);
  const int64_t one_per_push = int64_t{kWorkers} * kSteps * kTensors;
  if (coalesce) {
    CHECK(PushRequests(cluster) < one_per_push);
  } else {
    CHECK(PushRequests(cluster) == one_per_push);
  }
}

TEST_CASE("async: coalesced pushes are each applied once; the version counts them", "[coalescing]") {
  constexpr int kWorkers = 3, kSteps = 4;
  TestCluster cluster(ExactAsync(kWorkers));
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int r = 0; r < kWorkers; ++r) workers.push_back(Worker(cluster, r, /*coalesce=*/true));
  REQUIRE(workers[0]->Init(Zeros(ManyTensors())).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      auto grads = Zeros(ManyTensors());
      for (int step = 0; step < kSteps; ++step) {
        if (!PushLayerByLayer(*workers[r], step, 1.0f, grads)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  auto w = Zeros(ManyTensors());
  REQUIRE(PullAllTensors(*workers[0], 0, w));
  CHECK(AllEqual(w, -static_cast<float>(kWorkers * kSteps)));  // no push lost, none applied twice
  CHECK(cluster.core(0)->Stats().min_version == kWorkers * kSteps);
  CHECK(cluster.core(1)->Stats().max_version == kWorkers * kSteps);
  CHECK(PushRequests(cluster) < int64_t{kWorkers} * kSteps * kTensors);
}

TEST_CASE("a tensor pushed twice in a step while both wait: applied once, neither push refused", "[coalescing]") {
  TestCluster cluster(ExactAsync(1));
  std::unique_ptr<PsClient> worker = Worker(cluster, 0, /*coalesce=*/true);
  REQUIRE(worker->Init(Zeros(ManyTensors())).ok());
  // Every tensor twice, all calls at once: a request that took both would be
  // refused for naming a key twice. The second to arrive is a duplicate.
  auto ones = Zeros(ManyTensors()), fives = Zeros(ManyTensors());
  for (auto& g : ones) std::fill(g.begin(), g.end(), 1.0f);
  for (auto& g : fives) std::fill(g.begin(), g.end(), 5.0f);
  absl::BlockingCounter done(2 * kTensors);
  std::atomic<int> failed{0};
  for (auto* grads : {&ones, &fives}) {
    for (int t = kTensors - 1; t >= 0; --t) {
      worker->PushAsync(0, {{static_cast<uint32_t>(t), (*grads)[t].data()}}, [&](absl::Status s) {
        if (!s.ok()) ++failed;
        done.DecrementCount();
      });
    }
  }
  done.Wait();
  CHECK(failed == 0);
  auto w = Zeros(ManyTensors());
  REQUIRE(PullAllTensors(*worker, 0, w));
  int other = 0;  // values that are neither push applied once
  for (const auto& t : w) other += static_cast<int>(std::count_if(t.begin(), t.end(), [](float x) {
                          return x != -1.0f && x != -5.0f;
                        }));
  CHECK(other == 0);
  CHECK(cluster.core(0)->Stats().max_version == 1);
  CHECK(cluster.core(1)->Stats().max_version == 1);
}

// Pushes every tensor in its own call, last first, all at once, and waits up
// to 30 s for every answer: each tensor's status, or nothing on a timeout.
std::optional<std::vector<absl::Status>> PushEachTensor(PsClient& worker, int64_t step,
                                                         const std::vector<std::vector<float>>& grads) {
  absl::Mutex mu;
  std::vector<absl::Status> statuses(kTensors);
  int answered = 0;
  for (int t = kTensors - 1; t >= 0; --t) {
    worker.PushAsync(step, {{static_cast<uint32_t>(t), grads[t].data()}}, [&, t](absl::Status s) {
      absl::MutexLock lock(&mu);
      statuses[t] = std::move(s);
      ++answered;
    });
  }
  absl::MutexLock lock(&mu);
  const bool all = mu.AwaitWithTimeout(absl::Condition(
                                           +[](int* n) { return *n == kTensors; }, &answered),
                                       absl::Seconds(30));
  if (!all) return std::nullopt;
  return statuses;
}

TEST_CASE("a coalesced request refused for a NaN: its callers get the error, none of it is applied, the window empties",
          "[coalescing]") {
  TestCluster cluster(ExactAsync(1));
  std::unique_ptr<PsClient> worker = Worker(cluster, 0, /*coalesce=*/true);
  REQUIRE(worker->Init(Zeros(ManyTensors())).ok());
  auto grads = Zeros(ManyTensors());
  for (auto& g : grads) std::fill(g.begin(), g.end(), 1.0f);
  constexpr int kPoisoned = 17;
  grads[kPoisoned][2] = std::numeric_limits<float>::quiet_NaN();
  std::optional<std::vector<absl::Status>> step0 = PushEachTensor(*worker, 0, grads);
  REQUIRE(step0.has_value());  // every caller answered, held ones too
  INFO((*step0)[kPoisoned].ToString());
  REQUIRE((*step0)[kPoisoned].code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains((*step0)[kPoisoned].message(), "NaN or Inf"));
  auto w = Zeros(ManyTensors());
  REQUIRE(PullAllTensors(*worker, 0, w));
  int refused = 0, mixed = 0;
  for (int t = 0; t < kTensors; ++t) {
    const float want = (*step0)[t].ok() ? -1.0f : 0.0f;  // a refused request changed no key
    if (!(*step0)[t].ok()) ++refused;
    if (!AllEqual(std::vector<std::vector<float>>{w[t]}, want)) ++mixed;
  }
  CHECK(refused >= 1);
  CHECK(refused < kTensors);  // the other server's requests, at least, went through
  CHECK(mixed == 0);
  // The refused request's bytes left the window: a whole step more still fits.
  grads[kPoisoned][2] = 1.0f;
  std::optional<std::vector<absl::Status>> step1 = PushEachTensor(*worker, 1, grads);
  REQUIRE(step1.has_value());
  CHECK(std::all_of(step1->begin(), step1->end(), [](const absl::Status& s) { return s.ok(); }));
  REQUIRE(PullAllTensors(*worker, 1, w));
  for (int t = 0; t < kTensors; ++t) CHECK(AllEqual(std::vector<std::vector<float>>{w[t]}, (*step0)[t].ok() ? -2.0f : -1.0f));
}

TEST_CASE("Shutdown() answers each push once, CANCELLED: in flight, held behind the window or in a group",
          "[coalescing]") {
  TestCluster cluster(SyncOptions(2, 1));
  ClientOptions o = cluster.ClientFor(0, ManyTensors());
  o.servers = {absl::StrCat("127.0.0.1:", FreePort()), absl::StrCat("127.0.0.1:", FreePort())};  // never answer
  o.in_flight_bytes = 128;
  o.coalesce_pushes = true;
  absl::StatusOr<std::unique_ptr<PsClient>> worker = PsClient::Connect(o);
  REQUIRE(worker.ok());
  auto grads = Zeros(ManyTensors());
  absl::Mutex mu;
  std::vector<int> calls(kTensors, 0);
  std::vector<absl::Status> statuses(kTensors);
  for (int t = kTensors - 1; t >= 0; --t) {
    (*worker)->PushAsync(0, {{static_cast<uint32_t>(t), grads[t].data()}}, [&, t](absl::Status st) {
      absl::MutexLock lock(&mu);
      ++calls[t];
      statuses[t] = std::move(st);
    });
  }
  (*worker)->Shutdown();
  absl::MutexLock lock(&mu);
  for (int t = 0; t < kTensors; ++t) {
    INFO("tensor " << t << ": " << statuses[t].ToString());
    CHECK(calls[t] == 1);
    CHECK(statuses[t].code() == absl::StatusCode::kCancelled);
  }
}

}  // namespace
}  // namespace shardps::testing
