// client/job_alignment.h: how a worker joins a job from what every server
// answered. Pure; no sockets.
#include <catch2/catch.hpp>

#include "client/job_alignment.h"

namespace shardps {
namespace {

ServerJoinView Server(int id, int64_t step, std::vector<int64_t> checkpoints, bool awaiting = false) {
  ServerJoinView v;
  v.server_id = id;
  v.current_step = step;
  v.incarnation = 100 + id;
  v.awaiting_rewind = awaiting;
  v.initialized = true;
  v.trained = step > 0;
  v.checkpoint_steps = std::move(checkpoints);
  return v;
}

TEST_CASE("a job whose servers agree goes on at their step", "[alignment]") {
  for (Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    const JoinPlan plan = PlanJoin(mode, {Server(0, 7, {0}), Server(1, 7, {0})});
    REQUIRE(plan.action == JoinPlan::Action::kContinue);
    REQUIRE(plan.step == 7);
    REQUIRE(plan.behind.empty());
  }
}

TEST_CASE("servers at different steps: the worker goes on at the largest and tells the others", "[alignment]") {
  const JoinPlan plan = PlanJoin(Mode::kSync, {Server(0, 9, {}), Server(1, 10, {}), Server(2, 8, {})});
  REQUIRE(plan.action == JoinPlan::Action::kContinue);
  REQUIRE(plan.step == 10);
  REQUIRE(plan.behind == std::vector<int>{0, 2});
}

TEST_CASE("sync and ssp: a restored server makes every server rewind to the newest common step", "[alignment]") {
  for (Mode mode : {Mode::kSync, Mode::kSsp}) {
    const JoinPlan plan =
        PlanJoin(mode, {Server(0, 2074, {1900, 2000}), Server(1, 2000, {1900, 2000}, /*awaiting=*/true),
                        Server(2, 2075, {2000, 2100})});
    REQUIRE(plan.action == JoinPlan::Action::kRewind);
    REQUIRE(plan.step == 2000);
    REQUIRE(plan.timeline == 1);  // the job enters a new timeline
    REQUIRE(plan.restarted == std::vector<std::pair<int, uint64_t>>{{1, 101}});
  }
}

TEST_CASE("answers from before and after another worker's rewind are not mixed", "[alignment]") {
  ServerJoinView rewound = Server(0, 100, {0, 100});
  rewound.timeline = 1;
  const JoinPlan plan = PlanJoin(Mode::kSsp, {rewound, Server(1, 124, {0, 100})});
  REQUIRE(plan.action == JoinPlan::Action::kRegisterAgain);
  ServerJoinView other = Server(1, 100, {0, 100});
  other.timeline = 1;
  const JoinPlan agreed = PlanJoin(Mode::kSsp, {rewound, other});
  REQUIRE(agreed.action == JoinPlan::Action::kContinue);
  REQUIRE(agreed.timeline == 1);
}

TEST_CASE("async: a restored server is not a reason to rewind", "[alignment]") {
  const JoinPlan plan = PlanJoin(Mode::kAsync, {Server(0, 30, {0, 20}), Server(1, 20, {0, 20}, true)});
  REQUIRE(plan.action == JoinPlan::Action::kContinue);
  REQUIRE(plan.step == 30);
  REQUIRE(plan.behind == std::vector<int>{1});
}

TEST_CASE("no step on every server: the job cannot line up, and says which steps each has", "[alignment]") {
  const JoinPlan plan = PlanJoin(Mode::kSync, {Server(0, 300, {100, 200}), Server(1, 300, {300}, true)});
  REQUIRE(plan.action == JoinPlan::Action::kFail);
  REQUIRE(plan.error.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(plan.error.message()),
               Catch::Contains("server 0 has [100, 200]") && Catch::Contains("server 1 has [300]"));
}

// The worker registers again (its answer may predate the init reaching that
// server) and fails with this error if it stays so.
TEST_CASE("a server with no weights while another has trained: look again, else a lost shard", "[alignment]") {
  ServerJoinView empty = Server(1, 0, {});
  empty.initialized = false;
  const JoinPlan plan = PlanJoin(Mode::kAsync, {Server(0, 50, {}), empty});
  REQUIRE(plan.action == JoinPlan::Action::kRegisterAgain);
  REQUIRE(plan.error.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(plan.error.message()), Catch::Contains("server 1 holds no weights"));
  // At the job's start, before any step, an uninitialised server is normal.
  ServerJoinView fresh = Server(0, 0, {0});
  REQUIRE(PlanJoin(Mode::kSync, {fresh, empty}).action == JoinPlan::Action::kContinue);
}

}  // namespace
}  // namespace shardps
