// The gRPC replica link (server/grpc_replica_link.h) against a peer that
// records what it receives: updates queued while a call is out go in one
// call, in order, and a key updated again before its update left goes once,
// at its newest version (a link that falls behind sends each key once a
// call, not once a push). Real gRPC on 127.0.0.1.
#include <catch2/catch.hpp>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/tensor_frame.h"
#include "proto/shardps.pb.h"
#include "server/grpc_replica_link.h"

namespace shardps {
namespace {

using KeyVersion = std::pair<int, int64_t>;  // tensor, version

// A peer that records each Replicate call's (tensor, version) pairs, and
// holds the first call's answer until Release().
class RecordingPeer final : public grpc::CallbackGenericService {
 public:
  RecordingPeer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
  }
  ~RecordingPeer() override {
    Release();
    server_->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Waits (real time, up to 10 s) until `n` calls have come.
  bool AwaitCalls(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  std::vector<std::vector<KeyVersion>> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  void Release() {
    if (!released_.HasBeenNotified()) released_.Notify();
  }
  // Each call's timeline (ReplicateRequest.timeline).
  std::vector<int64_t> timelines() {
    absl::MutexLock lock(&mu_);
    return timelines_;
  }
  // The next `n` calls are answered OUT_OF_RANGE (a peer rewinding), not recorded.
  void AnswerOutOfRange(int n) { out_of_range_ = n; }
  int out_of_range_left() const { return out_of_range_.load(); }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(RecordingPeer* peer) : peer_(peer) { StartRead(&request_); }
    void OnReadDone(bool ok) override {
      wire::ReplicateRequest header;
      std::vector<KeyVersion> got;
      if (ok && FrameReader::Parse(request_, &header).ok()) {
        for (const wire::ReplicaKey& k : header.keys()) got.emplace_back(k.key().tensor(), k.version());
      }
      if (peer_->out_of_range_.fetch_sub(1) > 0) {
        return Finish(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "rewinding; try again"));
      }
      peer_->out_of_range_ = 0;
      bool first = false;
      {
        absl::MutexLock lock(&peer_->mu_);
        first = peer_->calls_.empty();
        peer_->calls_.push_back(std::move(got));
        peer_->timelines_.push_back(header.timeline());
      }
      if (first) peer_->released_.WaitForNotification();  // the link's next updates queue meanwhile
      response_ = MessageBuffer(wire::ReplicateResponse());
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    RecordingPeer* const peer_;
    grpc::ByteBuffer request_, response_;
  };
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Reactor(this);
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::vector<KeyVersion>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> timelines_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> out_of_range_{0};
  absl::Notification released_;
};

// Every answer a link gives, in order.
class Answers {
 public:
  std::function<void(absl::Status)> Done() {
    return [this](absl::Status s) {
      absl::MutexLock lock(&mu_);
      all_.push_back(std::move(s));
    };
  }
  std::vector<absl::Status> all() {
    absl::MutexLock lock(&mu_);
    return all_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> all_ ABSL_GUARDED_BY(mu_);
};

// A link from server 0 to `peer` as server 1.
std::unique_ptr<GrpcReplicaLink> LinkTo(const RecordingPeer& peer, const ReplicaLinkOptions& options = {}) {
  auto link = GrpcReplicaLink::Create(options);
  REQUIRE(link.ok());
  (*link)->SetPeers({"127.0.0.1:1", peer.address()});
  return *std::move(link);
}

ReplicaUpdate Update(int tensor, int64_t version) {
  return ReplicaUpdate{{static_cast<uint32_t>(tensor), 0}, version,
                       std::make_shared<const std::vector<float>>(4, float(version)), {}, {}};
}

TEST_CASE("replica link: a key updated again before its update left goes once, at its newest version",
          "[replication]") {
  RecordingPeer peer;
  auto link = LinkTo(peer);
  Answers answers;
  const auto done = answers.Done();
  link->Send(0, 1, 0, {Update(7, 1)}, done);
  REQUIRE(peer.AwaitCalls(1));  // out, and held
  link->Send(0, 1, 0, {Update(7, 2), Update(8, 1)}, done);
  link->Send(0, 1, 0, {Update(7, 3)}, done);
  link->Send(0, 1, 0, {Update(9, 1), Update(9, 2)}, done);
  peer.Release();
  REQUIRE(peer.AwaitCalls(2));
  const auto calls = peer.calls();
  CHECK(calls[0] == std::vector<KeyVersion>{{7, 1}});
  // Tensor 7 at version 2 is superseded by version 3, and 9 at 1 by 2.
  CHECK(calls[1] == std::vector<KeyVersion>{{8, 1}, {7, 3}, {9, 2}});
  CHECK(link->UpdatesSuperseded() == 2);
  link.reset();  // joins the sender: every answer is in
  CHECK(answers.all().size() == 4);
  for (const absl::Status& s : answers.all()) CHECK(s.ok());
  CHECK(calls.size() == 2);
}

TEST_CASE("replica link: updates of different keys all go, in order", "[replication]") {
  RecordingPeer peer;
  auto link = LinkTo(peer);
  absl::Notification answered;
  link->Send(0, 1, 0, {Update(1, 1)}, [](absl::Status) {});
  REQUIRE(peer.AwaitCalls(1));
  link->Send(0, 1, 0, {Update(2, 1)}, [](absl::Status) {});
  link->Send(0, 1, 0, {Update(3, 1), Update(4, 1)}, [&](absl::Status) { answered.Notify(); });
  peer.Release();
  REQUIRE(peer.AwaitCalls(2));
  CHECK(peer.calls()[1] == std::vector<KeyVersion>{{2, 1}, {3, 1}, {4, 1}});
  CHECK(link->UpdatesSuperseded() == 0);
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_CASE("replica link: a copy larger than half the message limit goes in several calls, answered once",
          "[replication]") {
  RecordingPeer peer;
  peer.Release();  // no call held
  ReplicaLinkOptions options;
  options.max_message_bytes = 64 << 10;  // a call carries 32 KB of values at most
  auto link = LinkTo(peer, options);
  std::vector<ReplicaUpdate> copy;  // 40 keys of 4 KB: a joiner's whole copy, 160 KB
  for (int t = 0; t < 40; ++t) {
    copy.push_back(ReplicaUpdate{{static_cast<uint32_t>(t), 0}, 1, std::make_shared<const std::vector<float>>(1024, t),
                                 {}, {}});
  }
  Answers answers;
  absl::Notification answered;
  link->Send(0, 1, 0, std::move(copy), [&, done = answers.Done()](absl::Status s) {
    done(std::move(s));
    answered.Notify();
  });
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  link.reset();  // joins the sender: every answer is in
  const auto calls = peer.calls();
  size_t keys = 0;
  for (const auto& call : calls) {
    keys += call.size();
    CHECK(call.size() <= 8);  // 8 x 4 KB = 32 KB
  }
  CHECK(keys == 40);
  CHECK(calls.size() >= 5);
  REQUIRE(answers.all().size() == 1);
  CHECK(answers.all()[0].ok());
}

// A rewind: each call carries one timeline, the one its updates were
// queued on; and a peer answering OUT_OF_RANGE (rewinding, or not on that
// timeline yet) is tried again for as long as it takes, far past the
// failover timeout: it answers, so it is not silent.
TEST_CASE("replica link: one timeline a call, and a peer that is rewinding is waited for, not taken for failed",
          "[replication]") {
  RecordingPeer peer;
  ReplicaLinkOptions options;
  options.failover_timeout = absl::Milliseconds(100);
  auto link = LinkTo(peer, options);
  Answers answers;
  const auto done = answers.Done();
  link->Send(0, 1, 3, {Update(1, 1)}, done);
  REQUIRE(peer.AwaitCalls(1));  // out, and held
  link->Send(0, 1, 3, {Update(2, 1)}, done);
  link->Send(0, 1, 4, {Update(3, 1)}, done);
  link->Send(0, 1, 4, {Update(4, 1)}, done);
  peer.AnswerOutOfRange(20);  // 20 answers 50 ms apart: 1 s, ten failover timeouts
  peer.Release();
  REQUIRE(peer.AwaitCalls(3));
  CHECK(peer.out_of_range_left() <= 0);
  CHECK(peer.timelines() == std::vector<int64_t>{3, 3, 4});
  CHECK(peer.calls()[1] == std::vector<KeyVersion>{{2, 1}});
  CHECK(peer.calls()[2] == std::vector<KeyVersion>{{3, 1}, {4, 1}});
  link.reset();  // joins the sender: every answer is in
  REQUIRE(answers.all().size() == 4);
  for (const absl::Status& s : answers.all()) CHECK(s.ok());
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

// Two servers that cannot reach each other must not name each other failed
// at the same moment: in a job of 2, the one whose copy has the lower id
// waits twice as long (tests/chaos:slow_link_test runs the case on real
// processes). Larger jobs keep one timeout.
TEST_CASE("replica link: in a job of 2, a silent copy with the lower id is waited for twice as long",
          "[replication]") {
  const absl::Duration t = absl::Seconds(3);
  CHECK(SilenceBeforeFailed(t, /*from=*/0, /*to=*/1, /*servers=*/2) == t);
  CHECK(SilenceBeforeFailed(t, /*from=*/1, /*to=*/0, /*servers=*/2) == 2 * t);
  CHECK(SilenceBeforeFailed(t, /*from=*/2, /*to=*/0, /*servers=*/3) == t);
  CHECK(SilenceBeforeFailed(t, /*from=*/1, /*to=*/2, /*servers=*/3) == t);
}

}  // namespace
}  // namespace shardps
