// The replication tests' training (tests/replication_test, tests/rejoin_test):
// workers of SmallLayout() pushing GradientOf() and pulling, in lockstep from
// the test's thread, with faults injected between steps; and the wait for a
// joining server to be live.
#ifndef SHARDPS_TESTS_LOCKSTEP_TRAINING_H_
#define SHARDPS_TESTS_LOCKSTEP_TRAINING_H_

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "tests/test_cluster.h"

namespace shardps::testing {

// What runs at a step: before worker 1's push of it (after worker 0's).
using StepEvents = std::map<int64_t, std::function<void()>>;

// `steps` steps of `workers` workers, each pushing GradientOf(rank, step)
// then pulling step + 1; `events` run as said above. Returns the weights
// worker 0 pulled last (sync: asserted equal to every other worker's; async
// pulls may answer different versions).
inline std::vector<std::vector<float>> TrainInLockstep(TestCluster& cluster, int workers, int64_t steps,
                                                       const StepEvents& events, bool sync) {
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int r = 0; r < workers; ++r) clients.push_back(cluster.Worker(r));
  REQUIRE(clients[0]->Init(Zeros(SmallLayout())).ok());
  std::vector<std::vector<std::vector<float>>> w(workers, Zeros(SmallLayout()));
  for (int64_t step = 0; step < steps; ++step) {
    for (int r = 0; r < workers; ++r) {
      if (auto e = events.find(step); e != events.end() && r == 1) e->second();
      absl::Status pushed = PushAll(*clients[r], step, GradientOf(r, step));
      INFO("worker " << r << " step " << step << ": " << pushed);
      REQUIRE(pushed.ok());
    }
    for (int r = 0; r < workers; ++r) {
      absl::Status pulled = PullAll(*clients[r], step + 1, w[r]);
      INFO("worker " << r << " step " << step << ": " << pulled);
      REQUIRE(pulled.ok());
    }
  }
  for (int r = 1; r < workers && sync; ++r) REQUIRE(w[r] == w[0]);
  return w[0];
}

// Waits (real time, up to 20 s) until every live server sees `s` live.
bool AwaitLive(TestCluster& cluster, int s, const std::vector<int>& servers) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (;;) {
    bool all = true;
    for (int t : servers) all = all && cluster.core(t)->View().Live(s);
    if (all) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_LOCKSTEP_TRAINING_H_
