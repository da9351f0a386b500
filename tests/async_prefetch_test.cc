// AsyncPrefetch (client/async_prefetch.h) with fetches that finish only when
// the test says so: one fetch per tensor in forward order, once per step;
// a delivery waits for its own tensors only, copies what was staged and
// passes a fetch's error on; a new step fetches anew; bad tensors are
// refused before anything is fetched; Forget makes the same step fetch anew.
#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <vector>

#include "client/async_prefetch.h"

namespace shardps {
namespace {

struct FakeFetches {
  struct Call {
    int64_t step;
    std::vector<TensorOut> tensors;
    PsClient::Done done;
  };
  std::vector<Call> calls;
  AsyncPrefetch::Fetch Fetch() {
    return [this](int64_t step, std::vector<TensorOut> tensors, PsClient::Done done) {
      calls.push_back({step, std::move(tensors), std::move(done)});
    };
  }
  // Finishes call i: its tensors are filled with `value` (on success).
  void Finish(size_t i, float value, absl::Status s = absl::OkStatus()) {
    if (s.ok()) {
      for (const TensorOut& t : calls[i].tensors) {
        for (int64_t k = 0; k < sizes[t.tensor]; ++k) t.values[k] = value;
      }
    }
    calls[i].done(s);
  }
  std::vector<int64_t> sizes;
};

// A delivery's outcome, once it runs.
struct Outcome {
  std::optional<absl::Status> status;
  PsClient::Done Done() {
    return [this](absl::Status s) { status = std::move(s); };
  }
};

TEST_CASE("one fetch per tensor in forward order, once per step", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {2, 3, 1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  p.Begin(5);
  p.Begin(5);  // begun already: nothing more
  REQUIRE(f.calls.size() == 3);
  for (uint32_t t = 0; t < 3; ++t) {
    CHECK(f.calls[t].step == 5);
    REQUIRE(f.calls[t].tensors.size() == 1);
    CHECK(f.calls[t].tensors[0].tensor == t);
  }
  std::vector<float> w(2, -1);
  Outcome o;
  p.Deliver(5, {{0, w.data()}}, o.Done());  // joins step 5: no new fetch
  CHECK(f.calls.size() == 3);
  p.Begin(6);  // a new step fetches anew
  CHECK(f.calls.size() == 6);
  CHECK(f.calls[3].step == 6);
}

TEST_CASE("a delivery waits for its own tensors, then copies what was staged", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {2, 3, 1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  p.Begin(1);
  std::vector<float> a(2, -1), b(3, -1), c(1, -1);
  Outcome late, early;
  p.Deliver(1, {{0, a.data()}, {2, c.data()}}, late.Done());
  f.Finish(0, 7);
  CHECK_FALSE(late.status.has_value());  // tensor 2 has not arrived
  CHECK(a == std::vector<float>{-1, -1});  // nothing copied before the last arrives
  f.Finish(1, 8);
  CHECK_FALSE(late.status.has_value());
  f.Finish(2, 9);
  REQUIRE(late.status.has_value());
  CHECK(late.status->ok());
  CHECK(a == std::vector<float>{7, 7});
  CHECK(c == std::vector<float>{9});
  CHECK(b == std::vector<float>{-1, -1, -1});  // not asked for
  p.Deliver(1, {{1, b.data()}}, early.Done());  // arrived already: at once
  REQUIRE(early.status.has_value());
  CHECK(early.status->ok());
  CHECK(b == std::vector<float>{8, 8, 8});
}

TEST_CASE("a fetch's error reaches the deliveries of its tensor only", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {1, 1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  std::vector<float> a(1, -1), b(1, -1);
  Outcome failed, fine, after;
  p.Deliver(3, {{0, a.data()}}, failed.Done());  // begins step 3
  p.Deliver(3, {{1, b.data()}}, fine.Done());
  REQUIRE(f.calls.size() == 2);
  f.Finish(0, 5, absl::UnavailableError("server 0 is down"));
  f.Finish(1, 6);
  REQUIRE(failed.status.has_value());
  CHECK(failed.status->code() == absl::StatusCode::kUnavailable);
  CHECK(failed.status->message() == "server 0 is down");
  CHECK(a == std::vector<float>{-1});  // a failed tensor is not copied
  REQUIRE(fine.status.has_value());
  CHECK(fine.status->ok());
  CHECK(b == std::vector<float>{6});
  p.Deliver(3, {{0, a.data()}}, after.Done());  // the error stays with the step
  REQUIRE(after.status.has_value());
  CHECK(after.status->code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a late fetch of the step before does not reach the next step's deliveries", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  p.Begin(1);
  std::vector<float> w(1, -1);
  Outcome o;
  p.Deliver(2, {{0, w.data()}}, o.Done());  // step 2 begins: fetch 1
  REQUIRE(f.calls.size() == 2);
  f.Finish(0, 100);  // step 1's, late
  CHECK_FALSE(o.status.has_value());
  f.Finish(1, 200);
  REQUIRE(o.status.has_value());
  CHECK(o.status->ok());
  CHECK(w == std::vector<float>{200});
}

TEST_CASE("after Forget the same step is fetched again: neither staged values nor errors are reused",
          "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {1, 1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  std::vector<float> w0(1, -1), w1(1, -1);
  Outcome before;
  p.Deliver(4, {{0, w0.data()}}, before.Done());  // begins step 4
  REQUIRE(f.calls.size() == 2);
  f.Finish(0, 7);
  f.Finish(1, 8, absl::UnavailableError("server 1 restarted"));
  REQUIRE(before.status.has_value());
  REQUIRE(before.status->ok());
  p.Forget();  // the worker registered again: a rewind may bring it back to step 4
  Outcome again;
  p.Deliver(4, {{0, w0.data()}, {1, w1.data()}}, again.Done());
  REQUIRE(f.calls.size() == 4);  // fetched afresh
  CHECK(f.calls[2].step == 4);
  CHECK_FALSE(again.status.has_value());  // waits for the new fetches, not the old values or error
  f.Finish(2, 70);
  f.Finish(3, 80);
  REQUIRE(again.status.has_value());
  CHECK(again.status->ok());
  CHECK(w0 == std::vector<float>{70});
  CHECK(w1 == std::vector<float>{80});
}

TEST_CASE("a delivery waiting when Forget comes is still answered by its fetches", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  std::vector<float> w(1, -1);
  Outcome waiting;
  p.Deliver(2, {{0, w.data()}}, waiting.Done());
  p.Forget();
  CHECK_FALSE(waiting.status.has_value());
  f.Finish(0, 3, absl::CancelledError("the old session's call"));
  REQUIRE(waiting.status.has_value());
  CHECK(waiting.status->code() == absl::StatusCode::kCancelled);
}

TEST_CASE("tensors outside the layout or without a buffer are refused, nothing fetched", "[async_prefetch]") {
  FakeFetches f;
  f.sizes = {1, 1};
  AsyncPrefetch p(f.sizes, f.Fetch());
  std::vector<float> w(1);
  Outcome outside, no_buffer;
  p.Deliver(1, {{2, w.data()}}, outside.Done());
  p.Deliver(1, {{0, nullptr}}, no_buffer.Done());
  REQUIRE(outside.status.has_value());
  CHECK(outside.status->code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(outside.status->message()) == "tensor 2 is not in the layout (2 tensors)");
  REQUIRE(no_buffer.status.has_value());
  CHECK(std::string(no_buffer.status->message()) == "tensor 0: no buffer to pull into");
  CHECK(f.calls.empty());
}

}  // namespace
}  // namespace shardps
