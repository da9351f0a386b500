// client/failover: a worker takes a server for failed only on evidence about
// the server as it stands now. A failure gathered while it stood otherwise
// (before it failed, or before it came back and joined) is dropped: a
// rejoined server was once named failed again by a worker whose call had
// been failing since the first kill (tests/chaos:replication_chaos_test).
#include <catch2/catch.hpp>

#include <memory>

#include "client/failover.h"
#include "common/replica_map.h"

namespace shardps {
namespace {

std::unique_ptr<Failover> ThreeServers() {
  absl::StatusOr<ReplicaMap> map = ReplicaMap::Build(3, 2);
  REQUIRE(map.ok());
  auto f = std::make_unique<Failover>(*map, absl::Seconds(3), KeptPushSteps(/*sync=*/true));
  f->Arm();
  return f;
}

TEST_CASE("failover: a failure counts against the standing it was seen under", "[replication]") {
  std::unique_ptr<Failover> owned = ThreeServers();
  Failover& f = *owned;
  const uint32_t live = f.view().generation(1);
  REQUIRE(f.MarkFailed(1, "a push: connection refused", live));
  CHECK(f.view().Failed(1));
  CHECK(f.ServingId(1) == 2);
  const uint32_t failed = f.view().generation(1);

  SECTION("seen again under the same failure: nothing changes") {
    CHECK_FALSE(f.MarkFailed(1, "a pull: connection refused", live));
    CHECK(f.view().generation(1) == failed);
  }
  SECTION("the server joins again: failures seen before that are dropped") {
    ServerView joins = f.view();
    joins.MarkJoining(1);
    f.Merge(joins, "server 2 says so");
    const uint32_t joining = f.view().generation(1);
    REQUIRE(f.view().Joining(1));
    CHECK_FALSE(f.MarkFailed(1, "a push: no answer for 2s, counted since the kill", live));
    CHECK_FALSE(f.MarkFailed(1, "a pull on a channel still in backoff", failed));
    CHECK(f.view().Joining(1));
    SECTION("and once it is live, its keys stay with it; a failure seen now counts") {
      ServerView back = f.view();
      back.MarkLive(1);
      f.Merge(back, "server 1 says so");
      CHECK_FALSE(f.MarkFailed(1, "stale", joining));
      CHECK(f.view().Live(1));
      CHECK(f.ServingId(1) == 2);  // server 2 kept them while 1 was away, and serves on
      CHECK(f.MarkFailed(1, "a push: connection reset", f.view().generation(1)));
      CHECK(f.view().Failed(1));
    }
    SECTION("a joining server that dies again is failed on evidence seen while it joins") {
      CHECK(f.MarkFailed(1, "a push: connection refused", joining));
      CHECK(f.view().Failed(1));
    }
  }
}

// A rewind: the pushes a worker keeps for a failover are of steps the job
// left behind, and are dropped when it lines up on the new timeline; an
// answer to a push sent before (late) is not kept either, nor does it move
// where the worker registers with a server live again.
TEST_CASE("failover: a new timeline drops the kept pushes, and a late answer of the old one is not kept",
          "[replication]") {
  std::unique_ptr<Failover> owned = ThreeServers();
  Failover& f = *owned;
  f.SetTimeline(0, 0);
  const ServerConnection::Attempt attempt = [](Stub&, grpc::ClientContext*, uint64_t,
                                               std::function<void(grpc::Status)> done) { done(grpc::Status::OK); };
  f.Retain(1, 1, 5, CallSpec{}, attempt, /*timeline=*/0);
  CHECK(f.RevivalPoint().step == 5);
  f.SetTimeline(1, 4);  // the job rewound to step 4
  CHECK(f.RevivalPoint().step == 3);
  CHECK(f.RevivalPoint().timeline == 1);
  f.Retain(1, 1, 6, CallSpec{}, attempt, /*timeline=*/0);  // a late answer to a push of step 6 of timeline 0
  CHECK(f.RevivalPoint().step == 3);
  f.Retain(1, 1, 4, CallSpec{}, attempt, /*timeline=*/1);
  CHECK(f.RevivalPoint().step == 4);
}

}  // namespace
}  // namespace shardps
