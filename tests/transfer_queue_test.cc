// TransferQueue: the byte budget is never exceeded (except by a lone
// transfer larger than it), waiting transfers start earliest step, then
// earliest layer first
// (strictly: a later layer never overtakes a waiting earlier one), equal
// priorities in submission order, and no budget starts everything. A
// group's waiting transfers go with the first of them that starts, within
// the grouping's bytes and the budget. The worker's automatic windows: more
// pushes than fetched weights in flight.
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "client/grpc_ps_client.h"
#include "client/transfer_queue.h"

namespace shardps {
namespace {

// Transfers that finish only when the test says so.
struct Recorder {
  std::vector<int> started;
  std::vector<std::function<void()>> finish;  // by transfer id
  TransferQueue::Start Transfer(int id) {
    return [this, id](std::function<void()> finished) {
      started.push_back(id);
      finish[id] = std::move(finished);
    };
  }
};

TEST_CASE("the budget holds transfers back; the earliest layer starts first", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{100});
  Recorder r;
  r.finish.resize(5);
  q.Submit({0, 5}, 60, r.Transfer(0));  // starts: nothing in flight
  q.Submit({0, 4}, 60, r.Transfer(1));  // waits: 60 + 60 > 100
  q.Submit({0, 9}, 30, r.Transfer(2));  // would fit, but waits behind the earlier layer 4 (strict priority)
  CHECK(r.started == std::vector<int>{0});
  CHECK(q.in_flight_bytes() == 60);
  q.Submit({0, 1}, 50, r.Transfer(3));  // waits, ahead of 1 and 2
  q.Submit({0, 1}, 50, r.Transfer(4));  // waits, after 3 (same priority)
  r.finish[0]();                   // 3 and 4 fit together
  CHECK(r.started == std::vector<int>{0, 3, 4});
  CHECK(q.in_flight_bytes() == 100);
  r.finish[3]();  // 50 in flight: 1 (60) does not fit yet
  CHECK(r.started == std::vector<int>{0, 3, 4});
  r.finish[4]();  // nothing in flight: 1 starts, then 2 fits beside it
  CHECK(r.started == std::vector<int>{0, 3, 4, 1, 2});
  CHECK(q.in_flight_bytes() == 90);
  r.finish[1]();
  r.finish[2]();
  CHECK(q.in_flight_bytes() == 0);
}

TEST_CASE("an earlier step goes first, whatever its tensor", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{10});
  Recorder r;
  r.finish.resize(3);
  q.Submit({7, 0}, 10, r.Transfer(0));   // starts
  q.Submit({8, 0}, 10, r.Transfer(1));   // the next step's first tensor
  q.Submit({7, 99}, 10, r.Transfer(2));  // this step's last tensor: ahead of it
  r.finish[0]();
  CHECK(r.started == std::vector<int>{0, 2});
  r.finish[2]();
  CHECK(r.started == std::vector<int>{0, 2, 1});
}

TEST_CASE("a reservation keeps its place: later transfers trickle one at a time until it comes", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{100});
  Recorder r;
  r.finish.resize(4);
  const TransferQueue::Ticket urgent = q.Reserve({1, 0});  // awaited: not ready yet
  q.Submit({1, 5}, 10, r.Transfer(0));  // nothing in flight: one may start behind the reservation
  q.Submit({1, 6}, 10, r.Transfer(1));  // waits: something is in flight
  CHECK(r.started == std::vector<int>{0});
  r.finish[0]();  // the next one trickles
  CHECK(r.started == std::vector<int>{0, 1});
  q.Submit({1, 7}, 10, r.Transfer(2));
  q.Submit(urgent, 50, r.Transfer(3));  // ready: it goes first, within the budget
  CHECK(r.started == std::vector<int>{0, 1, 3, 2});
  CHECK(q.in_flight_bytes() == 70);
  for (int i : {1, 2, 3}) r.finish[i]();
  CHECK(q.in_flight_bytes() == 0);
}

TEST_CASE("a cancelled reservation stops holding the line", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{100});
  Recorder r;
  r.finish.resize(3);
  const TransferQueue::Ticket lost = q.Reserve({0, 0});
  q.Submit({0, 3}, 10, r.Transfer(0));
  q.Submit({0, 4}, 10, r.Transfer(1));
  CHECK(r.started == std::vector<int>{0});
  q.Cancel(lost);  // its await failed: the rest may use the whole budget
  CHECK(r.started == std::vector<int>{0, 1});
  q.Submit(lost, 10, r.Transfer(2));  // a used-up ticket starts nothing
  CHECK(r.started == std::vector<int>{0, 1});
}

TEST_CASE("a transfer larger than the budget starts when nothing is in flight", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{10});
  Recorder r;
  r.finish.resize(2);
  q.Submit({0, 0}, 1000, r.Transfer(0));
  q.Submit({0, 0}, 5, r.Transfer(1));
  CHECK(r.started == std::vector<int>{0});
  r.finish[0]();
  CHECK(r.started == std::vector<int>{0, 1});
}

TEST_CASE("without a budget every transfer starts at once", "[transfer_queue]") {
  TransferQueue q(TransferQueue::Budget{0});
  int started = 0;
  for (int i = 0; i < 5; ++i) q.Submit({0, i}, 1 << 30, [&](std::function<void()> finished) { ++started; });
  CHECK(started == 5);
}

// Groups of transfers that finish only when the test says so.
struct GroupRecorder {
  std::vector<std::vector<uint64_t>> started;  // the ids of each start, in order
  std::vector<std::function<void()>> finish;   // by start
  TransferQueue::Grouping Grouping(int64_t max_bytes) {
    return {max_bytes, [this](std::vector<uint64_t> ids, std::function<void()> finished) {
              started.push_back(std::move(ids));
              finish.push_back(std::move(finished));
            }};
  }
};

TEST_CASE("a group's waiting transfers go with the first that starts, in line order, up to the grouping's bytes",
          "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue q(TransferQueue::Budget{100}, r.Grouping(50));
  q.SubmitToGroup({0, 0}, 100, /*group=*/1, /*id=*/1);  // starts alone: nothing waits
  q.SubmitToGroup({0, 1}, 20, 1, 2);  // the rest wait
  q.SubmitToGroup({0, 2}, 20, 1, 3);
  q.SubmitToGroup({0, 3}, 30, 2, 4);
  q.SubmitToGroup({0, 4}, 20, 1, 5);
  q.SubmitToGroup({0, 5}, 10, 2, 6);
  REQUIRE(r.started.size() == 1);
  r.finish[0]();
  // 2 takes 3 along (40 bytes; 5 would make 60); 4 takes 6 along; 5 waits
  // for its group's 40 bytes in flight.
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{1}, {2, 3}, {4, 6}});
  CHECK(q.in_flight_bytes() == 80);
  r.finish[1]();  // one finish gives back the group's 40 bytes; 5 starts
  CHECK(r.started.back() == std::vector<uint64_t>{5});
  CHECK(q.in_flight_bytes() == 60);
  r.finish[2]();
  r.finish[3]();
  CHECK(q.in_flight_bytes() == 0);
}

TEST_CASE("a group's transfers overtake others to go together, past the budget by the grouping's bytes at most",
          "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue q(TransferQueue::Budget{100}, r.Grouping(100));
  q.SubmitToGroup({0, 0}, 100, 1, 1);  // fills the budget
  q.SubmitToGroup({0, 1}, 40, 1, 2);
  q.SubmitToGroup({0, 2}, 40, 2, 3);  // another group, between
  q.SubmitToGroup({0, 3}, 40, 1, 4);  // goes with 2, ahead of 3
  q.SubmitToGroup({0, 4}, 40, 1, 5);  // would make the group 120: stays behind 3
  q.SubmitToGroup({0, 5}, 10, 1, 6);  // would fit, but stays behind 5: a group keeps its order
  r.finish[0]();
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{1}, {2, 4}});
  r.finish[1]();  // 3 waited behind the group
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{1}, {2, 4}, {3}, {5, 6}});
  CHECK(q.in_flight_bytes() == 90);
}

TEST_CASE("a group that passes the budget holds back everything after it until the bytes are back under",
          "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue q(TransferQueue::Budget{100}, r.Grouping(100));
  q.SubmitToGroup({0, 0}, 50, 1, 1);
  q.SubmitToGroup({0, 1}, 40, 2, 2);  // fits beside 1: 90
  q.SubmitToGroup({0, 2}, 10, 4, 3);  // fits: 100
  q.SubmitToGroup({0, 3}, 50, 3, 4);
  q.SubmitToGroup({0, 4}, 50, 3, 5);
  q.SubmitToGroup({0, 5}, 10, 4, 6);
  r.finish[2]();  // 10 free: 4 fits no more than before (140 > 100)
  CHECK(r.started.size() == 3);
  r.finish[1]();  // 40 more free: 4 fits, and takes 5 along: 150 in flight
  CHECK(r.started.back() == std::vector<uint64_t>{4, 5});
  CHECK(q.in_flight_bytes() == 150);
  r.finish[0]();  // 100: 6 still waits
  CHECK(r.started.size() == 4);
  r.finish[3]();
  CHECK(r.started.back() == std::vector<uint64_t>{6});
}

TEST_CASE("a group's small transfers wait while one of it is in flight, and gather; others overtake them",
          "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue q(TransferQueue::Budget{1000}, r.Grouping(100));
  q.SubmitToGroup({0, 0}, 30, 1, 1);  // starts
  q.SubmitToGroup({0, 1}, 30, 1, 2);  // waits: its group has 1 in flight
  q.SubmitToGroup({0, 2}, 30, 1, 3);
  q.SubmitToGroup({0, 3}, 20, 2, 4);  // another group: starts, ahead of 2 and 3
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{1}, {4}});
  q.SubmitToGroup({0, 4}, 30, 1, 5);  // 90 waiting: still less than a full transfer
  CHECK(r.started.size() == 2);
  q.SubmitToGroup({0, 5}, 30, 1, 6);  // 120: a full one goes (90 of it), 6 waits
  CHECK(r.started.back() == std::vector<uint64_t>{2, 3, 5});
  r.finish[0]();  // the group still has 2, 3 and 5 in flight
  CHECK(r.started.size() == 3);
  r.finish[2]();
  CHECK(r.started.back() == std::vector<uint64_t>{6});
}

TEST_CASE("a group's full-sized transfers follow each other without waiting", "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue q(TransferQueue::Budget{400}, r.Grouping(100));
  for (uint64_t id = 0; id < 5; ++id) q.SubmitToGroup({0, 0}, 100, 1, id);
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{0}, {1}, {2}, {3}});  // the budget, not the group, holds 4
  r.finish[0]();
  CHECK(r.started.back() == std::vector<uint64_t>{4});
}

TEST_CASE("without grouping bytes, or without a budget, each transfer of a group goes alone", "[transfer_queue]") {
  GroupRecorder r;
  TransferQueue none(TransferQueue::Budget{10}, r.Grouping(0));
  for (uint64_t id = 0; id < 3; ++id) none.SubmitToGroup({0, 0}, 10, 1, id);
  r.finish[0]();
  r.finish[1]();
  CHECK(r.started == std::vector<std::vector<uint64_t>>{{0}, {1}, {2}});
  GroupRecorder u;
  TransferQueue unlimited(TransferQueue::Budget{0}, u.Grouping(1000));
  for (uint64_t id = 0; id < 3; ++id) unlimited.SubmitToGroup({0, 0}, 10, 1, id);
  CHECK(u.started == std::vector<std::vector<uint64_t>>{{0}, {1}, {2}});
}

TEST_CASE("automatic windows: 512 KB of pushes and 256 KB of fetched weights at least, two requests at least "
          "(2 MB of pushes by default); in_flight_bytes sets both",
          "[transfer_queue]") {
  ClientOptions o;
  // By default a push request carries up to 1 MB, a fetch one partition.
  CHECK(PushRequestBytes(o) == 1 << 20);
  CHECK(FetchRequestBytes(o) == 32 << 10);
  CHECK(PushBudget(o).total == 2 << 20);
  o.push_request_bytes = 0;  // one partition per request
  CHECK(PushRequestBytes(o) == 32 << 10);
  CHECK(PushBudget(o).total == 512 << 10);
  CHECK(FetchBudget(o).total == 256 << 10);
  CHECK(FetchBudget(o).behind_reservation == 128 << 10);
  // Ten 64 KB transfers queued: the fetch window lets four go where the push window lets eight.
  TransferQueue pushes(PushBudget(o)), fetches(FetchBudget(o));
  int pushed = 0, fetched = 0;
  for (int i = 0; i < 10; ++i) {
    pushes.Submit({0, i}, 64 << 10, [&](std::function<void()>) { ++pushed; });
    fetches.Submit({0, i}, 64 << 10, [&](std::function<void()>) { ++fetched; });
  }
  CHECK(pushed == 8);
  CHECK(fetched == 4);
  // Partitions of 2 MB: two requests of them in flight, not one.
  o.job.partition_bytes = 2 << 20;
  CHECK(PushBudget(o).total == 4 << 20);
  CHECK(FetchBudget(o).total == 4 << 20);
  CHECK(FetchBudget(o).behind_reservation == 128 << 10);
  o.job.partition_bytes = 200 << 10;  // between the two floors
  CHECK(PushBudget(o).total == 512 << 10);
  CHECK(FetchBudget(o).total == 400 << 10);
  // Requests that carry several partitions: the window of each direction
  // holds two of its own.
  o.job.partition_bytes = 32 << 10;
  o.push_request_bytes = 1 << 20;
  CHECK(PushRequestBytes(o) == 1 << 20);
  CHECK(FetchRequestBytes(o) == 32 << 10);
  CHECK(PushBudget(o).total == 2 << 20);
  CHECK(FetchBudget(o).total == 256 << 10);
  o.fetch_request_bytes = 16 << 10;  // below a partition: a partition
  CHECK(FetchRequestBytes(o) == 32 << 10);
  o.max_message_bytes = 1 << 20;  // past half the message limit: held to it
  CHECK(PushRequestBytes(o) == 512 << 10);
  o.max_message_bytes = 256 << 20;
  o.in_flight_bytes = 1 << 20;
  CHECK(PushBudget(o).total == 1 << 20);
  CHECK(FetchBudget(o).total == 1 << 20);
}

TEST_CASE("a request is held to half a window set by hand, and is a partition's values at least on the wire",
          "[transfer_queue]") {
  ClientOptions o;
  o.job.partition_bytes = 32 << 10;
  o.in_flight_bytes = 512 << 10;  // two 256 KB requests, not one 1 MB push alone
  CHECK(PushRequestBytes(o) == 256 << 10);
  o.in_flight_bytes = 16 << 10;  // below a partition: a partition still
  CHECK(PushRequestBytes(o) == 32 << 10);
  o.in_flight_bytes = -1;  // no window: no hold
  CHECK(PushRequestBytes(o) == 1 << 20);
  // bfloat16 halves a partition's bytes on the wire: a fetch is still one key.
  o.wire_dtype = wire::DTYPE_BFLOAT16;
  o.fetch_request_bytes = 0;
  CHECK(FetchRequestBytes(o) == 16 << 10);
}

TEST_CASE("with the first-weights lane sync fetches have no window unless in_flight_bytes sets one; pushes keep theirs",
          "[transfer_queue]") {
  ClientOptions o;
  o.first_weights_lane = true;
  CHECK(FetchBudget(o).total <= 0);
  CHECK(PushBudget(o).total == 2 << 20);
  TransferQueue fetches(FetchBudget(o));
  int fetched = 0;
  for (int i = 0; i < 100; ++i) fetches.Submit({0, i}, 1 << 20, [&](std::function<void()>) { ++fetched; });
  CHECK(fetched == 100);  // none waits
  o.in_flight_bytes = 1 << 20;
  CHECK(FetchBudget(o).total == 1 << 20);
  o.in_flight_bytes = 0;
  for (Mode mode : {Mode::kAsync, Mode::kSsp}) {  // which ignore the lane
    o.job.mode = mode;
    CHECK(FetchBudget(o).total == 256 << 10);
  }
}

// A layout of tensors of these sizes.
Layout Sized(const std::vector<int64_t>& sizes) {
  Layout layout;
  for (size_t i = 0; i < sizes.size(); ++i) layout.tensors.push_back({"t" + std::to_string(i), {sizes[i]}});
  return layout;
}

TEST_CASE("the first weights are the tensors that begin within the first 4% of the model, one at least",
          "[transfer_queue]") {
  CHECK(FirstWeightsTensors(Sized({10, 10, 19, 961})) == 4);  // the fourth begins at 39 of 1000
  CHECK(FirstWeightsTensors(Sized({10, 10, 20, 960})) == 3);  // at 40: past
  CHECK(FirstWeightsTensors(Sized({1000, 1, 1})) == 1);
  CHECK(FirstWeightsTensors(Sized({5})) == 1);
  CHECK(FirstWeightsTensors(Sized({1, 1, 1, 1})) == 1);  // the second begins at a quarter
  CHECK(FirstWeightsTensors(Layout{}) == 0);
}

}  // namespace
}  // namespace shardps
