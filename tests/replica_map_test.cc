// common/replica_map: chains of servers per primary, who serves them as
// servers fail, and the balance of what each server holds.
#include <catch2/catch.hpp>

#include <algorithm>

#include "common/key_partition.h"
#include "common/replica_map.h"
#include "common/shared_server_view.h"

namespace shardps {
namespace {

TEST_CASE("a chain is the primary and the next servers, wrapping around") {
  ReplicaMap map = *ReplicaMap::Build(3, 2);
  CHECK(map.Chain(0) == std::vector<int>{0, 1});
  CHECK(map.Chain(2) == std::vector<int>{2, 0});
  CHECK(map.Holds(1, 0));
  CHECK(map.Holds(0, 2));
  CHECK_FALSE(map.Holds(2, 0));
  CHECK(map.PrimariesHeldBy(0) == std::vector<int>{0, 2});
  CHECK(ReplicaMap::Build(3, 1)->Chain(1) == std::vector<int>{1});
  CHECK(ReplicaMap::Build(3, 1)->PrimariesHeldBy(1) == std::vector<int>{1});
}

TEST_CASE("the first live server of a chain serves it; none when every copy failed") {
  ReplicaMap map = *ReplicaMap::Build(3, 2);
  ServerView view;
  CHECK(view.Pristine());
  CHECK(map.Serving(1, view) == 1);
  CHECK(map.NextCopy(1, 1, view) == 2);
  view.MarkFailed(1);
  CHECK(map.Serving(1, view) == 2);
  CHECK(map.Serving(0, view) == 0);
  CHECK(map.NextCopy(0, 0, view) == -1);  // 0's backup failed: a single copy
  CHECK(map.NextCopy(1, 2, view) == -1);
  view.MarkFailed(2);
  CHECK(map.Serving(1, view) == -1);
  CHECK(view.DebugString() == "{1 failed, 2 failed}");
  CHECK(view.Count(Standing::kFailed) == 2);
  CHECK(view.Count(Standing::kLive) == kMaxReplicatedServers - 2);
}

TEST_CASE("a server that joins again backs up the keys it held, and serves them only once the other copy fails") {
  ReplicaMap map = *ReplicaMap::Build(3, 2);
  ServerView view;
  view.MarkFailed(1);
  view.MarkJoining(1);
  CHECK(view.Joining(1));
  CHECK(view.generation(1) > view.generation(0));
  // Joining: it takes copies from the servers serving its keys, but pulls do
  // not wait for it, and it serves nothing.
  CHECK(map.Serving(1, view) == 2);
  CHECK(map.NextCopy(1, 2, view) == 1);
  CHECK(map.NextCopy(0, 0, view) == 1);
  CHECK(map.NextCopy(1, 2, view, /*with_joining=*/false) == -1);
  view.MarkLive(1);
  CHECK(view.Live(1));
  CHECK(map.Serving(1, view) == 2);  // the server that kept the keys keeps serving them
  CHECK(map.NextCopy(1, 2, view, false) == 1);
  CHECK(map.NextCopy(1, 1, view) == -1);
  view.MarkFailed(2);  // the other copy's server fails: the rejoined one serves
  CHECK(map.Serving(1, view) == 1);
  CHECK(map.Serving(2, view) == 0);
  view.MarkJoining(2);
  view.MarkLive(2);
  CHECK(map.Serving(1, view) == 1);
  CHECK(map.NextCopy(1, 1, view) == 2);
}

TEST_CASE("views merge by the larger generation per server, and travel as text") {
  ServerView a, b;
  a.MarkFailed(1);
  b.MarkFailed(1);
  b.MarkJoining(1);
  b.MarkFailed(3);
  CHECK(a.Merge(b) == std::vector<int>{1, 3});
  CHECK(a == b);
  CHECK(a.Merge(b).empty());
  CHECK(ServerView::Parse(a.Text()) == a);
  CHECK(a.Text() == "0,5,0,1");
  CHECK(ServerView::Parse("")->Pristine());
  CHECK_FALSE(ServerView::Parse("1,x").has_value());
  CHECK_FALSE(ServerView::Parse("-1").has_value());
  CHECK_FALSE(ServerView::Parse("+5").has_value());
  CHECK_FALSE(ServerView::Parse("0,,1").has_value());
  CHECK_FALSE(ServerView::Parse("4294967295").has_value());
  CHECK_FALSE(ServerView::Parse(std::string(65 * 2, ',')).has_value());
  a.MarkFailed(1);  // joining, then failed
  CHECK(a.Failed(1));
  CHECK(a.generation(1) == 7);
}

TEST_CASE("a shared view merges and edits as a view does, and loads what it holds") {
  SharedServerView shared;
  CHECK(shared.Pristine());
  CHECK(shared.Load().Pristine());
  ServerView failed;
  failed.MarkFailed(2);
  const SharedServerView::Change c = shared.Merge(failed);
  CHECK(c.before.Pristine());
  CHECK(c.rose == std::vector<int>{2});
  CHECK(c.now == failed);
  CHECK(shared.Load() == failed);
  CHECK_FALSE(shared.Pristine());
  CHECK(shared.Merge(failed).rose.empty());
  const ServerView joined = shared.Edit([](ServerView& v) { v.MarkJoining(2); });
  CHECK(joined.Joining(2));
  CHECK(shared.Load() == joined);
}

TEST_CASE("bad replica counts are refused with the reason") {
  CHECK(ReplicaMap::Build(2, 3).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReplicaMap::Build(2, 0).status().code() == absl::StatusCode::kInvalidArgument);
  auto too_many = ReplicaMap::Build(65, 2);
  REQUIRE(too_many.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(too_many.status().message()), Catch::Contains("at most 64 servers"));
  CHECK(ReplicaMap::Build(65, 1).ok());
}

TEST_CASE("with 2 replicas every server holds about twice its primary bytes") {
  Layout layout;
  for (int t = 0; t < 7; ++t) layout.tensors.push_back({"t" + std::to_string(t), {1000 + 300 * t}});
  KeyMap keys = *KeyMap::Build(layout, 4, 1024);
  ReplicaMap map = *ReplicaMap::Build(4, 2);
  std::vector<int64_t> held(4, 0);
  for (int s = 0; s < 4; ++s) {
    for (int p : map.PrimariesHeldBy(s)) held[s] += keys.BytesOfServer(p);
  }
  const auto [lo, hi] = std::minmax_element(held.begin(), held.end());
  int64_t total = 0;
  for (int s = 0; s < 4; ++s) total += keys.BytesOfServer(s);
  CHECK(*lo + *hi > 0);
  CHECK(static_cast<double>(*hi - *lo) <= 0.02 * static_cast<double>(total));
}

}  // namespace
}  // namespace shardps
