// Recovery tests' servers: a TestCluster whose servers write checkpoints
// only when a test asks (their clock is manual and advanced only while the
// test waits for a checkpoint), and options for servers that restart as a
// crash leaves them.
#ifndef SHARDPS_TESTS_CHECKPOINTS_ON_DEMAND_H_
#define SHARDPS_TESTS_CHECKPOINTS_ON_DEMAND_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/test_cluster.h"

namespace shardps::testing {

// Servers on a manual clock, advanced only while a test waits for a
// checkpoint, so that no checkpoint newer than the one it waited for is
// written before it restarts a server; clients keep real time for retries.
struct CheckpointsOnDemand {
  ManualClock clock;
  TestCluster cluster;
  explicit CheckpointsOnDemand(const ServerOptions& o) : cluster(o, HostOptions(), &clock) {
    cluster.PutClientsOnRealClock();
  }
  // Advances the servers' clock a tick at a time (their housekeeping
  // threads run on it) until `done()`, for up to 10 s of real time.
  template <typename Done>
  bool TickUntil(Done done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < give_up) {
      clock.Advance(HostOptions().tick_interval);
      absl::SleepFor(absl::Milliseconds(5));
    }
    return done();
  }
  // Ticks the servers (their housekeeping writes checkpoints) until every
  // one holds a checkpoint of `step`, for up to 10 s of real time.
  bool Reach(int servers, int64_t step) {
    return TickUntil([&] {
      for (int s = 0; s < servers; ++s) {
        const std::vector<int64_t> steps = cluster.core(s)->Stats().checkpoint_steps;
        if (std::find(steps.begin(), steps.end(), step) == steps.end()) return false;
      }
      return true;
    });
  }
};

// `mode` servers that checkpoint every 2 steps into `dir` and write none on
// shutdown, so that TestCluster::Restart stops one as a crash would.
inline ServerOptions CrashingServers(Mode mode, int servers, int workers, const std::string& dir) {
  ServerOptions o = SyncOptions(servers, workers);
  o.job.mode = mode;
  o.checkpoint_dir = dir;
  o.checkpoint_every_steps = 2;
  o.checkpoint_on_shutdown = false;
  return o;
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_CHECKPOINTS_ON_DEMAND_H_
