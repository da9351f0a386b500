// Re-replication (DESIGN.md, "Replication"; ps_server --join): a killed
// server started again joins the running job, is copied its keys while the
// workers go on, and then backs them up again, so that the kill of the
// other copy's server loses nothing either. In-process servers over real
// gRPC (tests/test_cluster.h), 3 servers, --replicas=2; the same with real
// processes is tests/chaos:replication_chaos_test.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "tests/lockstep_training.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

constexpr int kServers = 3;
constexpr int kWorkers = 2;
constexpr int kSteps = 10;

ServerOptions Options(Mode mode) {
  ServerOptions o = SyncOptions(kServers, kWorkers);
  o.job.mode = mode;
  o.job.replicas = 2;
  o.optimizer.lr = 0.5;
  o.optimizer.momentum = 0.9;  // a slot the copies must have too
  o.async_lr_scaling = AsyncLrScaling::kNone;
  return o;
}

TEST_CASE("rejoin: a killed server joins again, is copied its keys, and then the other copy can go", "[replication]") {
  // `spare`: it joins on a new port, where no worker or peer was told to look.
  for (auto [mode, spare] : {std::pair{Mode::kSync, false}, std::pair{Mode::kAsync, false}, std::pair{Mode::kSync, true},
                             std::pair{Mode::kAsync, true}}) {
    INFO(ModeName(mode) << (spare ? ", a spare on a new port" : ""));
    std::vector<std::vector<float>> calm;
    {
      TestCluster cluster(Options(mode));
      calm = TrainInLockstep(cluster, kWorkers, kSteps, {}, mode == Mode::kSync);
    }
    TestCluster cluster(Options(mode));
    ServerStats joining_stats;
    const auto w = TrainInLockstep(cluster, kWorkers, kSteps, {{2, [&] { cluster.Kill(1); }},
                                   {4,
                                    [&] {
                                      cluster.RestartJoining(1, spare);
                                      REQUIRE(AwaitLive(cluster, 1, {0, 1, 2}));
                                      joining_stats = cluster.core(1)->Stats();
                                    }},
                                   {7, [&] { cluster.Kill(2); }}},
                                   mode == Mode::kSync);
    // Server 1 took every key it holds from the servers that kept them.
    CHECK(joining_stats.keys_to_copy == 0);
    CHECK(joining_stats.replica_keys_installed >= joining_stats.num_keys);
    CHECK(joining_stats.view.Failed(1) == false);
    // Server 2's keys are served by server 0 now, server 1's by server 1,
    // and every update of every step is there: sync ends at the undisturbed
    // run's weights, bit for bit; async has counted every push.
    for (int s : {0, 1}) {
      const ServerStats st = cluster.core(s)->Stats();
      INFO("server " << s);
      CHECK(st.view.Failed(2));
      CHECK(st.max_version == (mode == Mode::kSync ? kSteps : kSteps * kWorkers));
    }
    CHECK(cluster.core(1)->Stats().min_version == (mode == Mode::kSync ? kSteps : kSteps * kWorkers));
    if (mode == Mode::kSync) CHECK(w == calm);
    if (spare) {
      // Server 0 learned where server 1 is, and so did the workers (their
      // pushes and pulls for server 1's keys went there after server 2's kill).
      const std::string moved = cluster.core(0)->MovedText();
      CHECK_THAT(moved, Catch::StartsWith("1=") && Catch::EndsWith(cluster.Addresses()[1]));
      CHECK(cluster.core(1)->MovedText() == moved);
    }
  }
}

TEST_CASE("rejoin: a running server tells a joiner the job's layout; only a server that stepped down rejoins",
          "[replication]") {
  TestCluster cluster(Options(Mode::kSync));
  std::unique_ptr<PsClient> worker = cluster.Worker(0);
  std::unique_ptr<PsClient> other = cluster.Worker(1);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  // Initialised but not trained: the job is starting, and a server with
  // --join starts with it rather than joining.
  CHECK_FALSE(cluster.core(0)->AnswerJoin(1).initialized);
  REQUIRE(PushAll(*worker, 0, GradientOf(0, 0)).ok());
  REQUIRE(PushAll(*other, 0, GradientOf(1, 0)).ok());
  std::vector<std::vector<float>> w = Zeros(SmallLayout());
  REQUIRE(PullAll(*worker, 1, w).ok());
  const JoinInfo running = cluster.core(0)->AnswerJoin(1);
  CHECK(running.initialized);
  CHECK(running.layout == SmallLayout());
  // An initialised server cannot join (its workers made it a new job).
  const absl::Status again = cluster.core(0)->BeginJoin(SmallLayout(), 0, ServerView());
  CHECK(again.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(again.message()), Catch::Contains("nothing to join"));
  // Nor rejoin unless it stepped down; once named failed, it can.
  const absl::Status live = cluster.core(0)->Rejoin();
  CHECK(live.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(live.message()), Catch::Contains("nothing to rejoin"));
  ServerView failed;
  failed.MarkFailed(0);
  cluster.core(0)->NoteView(failed);
  REQUIRE(cluster.core(0)->Rejoin().ok());
  CHECK(cluster.core(0)->View().Joining(0));
  CHECK(cluster.core(0)->Stats().keys_to_copy == cluster.core(0)->Stats().num_keys);
}

}  // namespace
}  // namespace shardps::testing
