// client/server_connection: channels it replaces (Renew, Repoint, a longer
// connect timeout) are closed once no call holds them, on the thread that
// tends the connection, and never while a call in flight still uses them;
// and a call to a server live again after a restart registers there first.
// Real gRPC on loopback against an in-process server.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <utility>

#include "absl/synchronization/notification.h"
#include "client/delayed_executor.h"
#include "client/failover.h"
#include "client/server_connection.h"
#include "common/layout.h"
#include "common/replica_map.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// Registers `connection` with its server and waits for the answer.
absl::Status RegisterAndWait(ServerConnection& connection) {
  absl::Notification registered;
  absl::Status status;
  connection.Register(std::nullopt, [&](absl::StatusOr<wire::RegisterResponse> r) {
    status = r.status();
    registered.Notify();
  });
  registered.WaitForNotification();
  return status;
}

// An await-only pull of key (0, 0) at `step` on `connection`, with `spec`;
// `done` gets its status.
void AwaitPull(ServerConnection& connection, const CallSpec& spec, int64_t step,
               std::function<void(absl::Status)> done) {
  connection.Call(
      spec,
      [step](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> answered) {
        auto req = std::make_shared<wire::PullRequest>();
        auto resp = std::make_shared<wire::PullResponse>();
        req->set_session_id(session);
        req->set_step(step);
        req->set_await_only(true);
        wire::Key* key = req->add_keys();
        key->set_tensor(0);
        key->set_chunk(0);
        stub.proto->async()->Pull(ctx, req.get(), resp.get(), [req, resp, answered](grpc::Status s) { answered(s); });
      },
      std::move(done));
}

TEST_CASE("replaced channels close once no call holds them, and not before") {
  TestCluster cluster(SyncOptions(1, 2));
  std::unique_ptr<PsClient> initializer = cluster.Worker(0);
  REQUIRE(initializer->Init({std::vector<float>(15, 0.0f), std::vector<float>(5, 0.0f)}).ok());

  ClientOptions options = cluster.ClientFor(1);
  options.channels_per_server = 2;
  options.job.layout_hash = LayoutHash(options.layout);  // as PsClient::Connect fills it
  RealClock clock;
  DelayedExecutor executor(&clock);
  ServerConnection connection(0, options, grpc::InsecureChannelCredentials(), &clock, &executor);
  const absl::Status registration = RegisterAndWait(connection);
  INFO(registration.message());
  REQUIRE(registration.ok());

  // Replaced while idle: both channels close at the next tend.
  connection.Renew();
  CHECK(connection.retired_stubs() == 2);
  connection.CloseIdleRetired();
  CHECK(connection.retired_stubs() == 0);

  // A pull of step 5 waits on the server (sync: the step is far off) until
  // its 2 s deadline: its channel stays open while it does.
  absl::Notification answered;
  AwaitPull(connection, CallSpec{"pull", absl::Seconds(2), OnAbort::kFail, Lane::kOthers}, 5,
            [&](absl::Status) { answered.Notify(); });
  REQUIRE(AwaitWaitingPulls(cluster.core(0), 1));  // the server holds it
  REQUIRE_FALSE(answered.HasBeenNotified());
  connection.Renew();
  connection.CloseIdleRetired();
  CHECK(connection.retired_stubs() == 1);  // the pull's channel
  answered.WaitForNotification();           // deadline, retries, then the server timeout
  connection.CloseIdleRetired();
  CHECK(connection.retired_stubs() == 0);
  connection.StopAndCancel();
  connection.AwaitIdle();
}

// A sync pull of step 0 for key (0, 0) on `connection`, as a worker's: it
// fails over, and an ABORTED answer fails it for the worker to rejoin.
absl::Status SyncPull(ServerConnection& connection) {
  absl::Notification answered;
  absl::Status status;
  CallSpec spec{"pull", absl::Seconds(2), OnAbort::kRejoin, Lane::kOthers};
  spec.fails_over = true;
  spec.keys_of = 0;
  AwaitPull(connection, spec, 0, [&](absl::Status s) {
    status = s;
    answered.Notify();
  });
  answered.WaitForNotification();
  return status;
}

TEST_CASE("replication: a call to a server live again registers there first, not with the session it had") {
  // Server 0 restarts (its sessions are gone); this worker's view of the
  // servers shows it failed and live again, but Failover::Merge has not yet
  // revived the connection (a call on another thread can fall in that
  // window: tests/chaos:replication_chaos_test, 2026-11-27). The server is
  // unreplicated, so it ignores the view the calls carry.
  TestCluster cluster(SyncOptions(1, 2));
  std::unique_ptr<PsClient> initializer = cluster.Worker(0);
  const std::vector<std::vector<float>> zeros = {std::vector<float>(15, 0.0f), std::vector<float>(5, 0.0f)};
  REQUIRE(initializer->Init(zeros).ok());
  ClientOptions options = cluster.ClientFor(1);
  options.job.layout_hash = LayoutHash(options.layout);
  RealClock clock;
  DelayedExecutor executor(&clock);
  ServerConnection connection(0, options, grpc::InsecureChannelCredentials(), &clock, &executor);
  Failover failover(*ReplicaMap::Build(2, 2), absl::Seconds(3), KeptPushSteps(/*sync=*/true));
  connection.SetFailover(&failover);
  failover.Attach({&connection});
  const absl::Status registration = RegisterAndWait(connection);
  INFO(registration.message());
  REQUIRE(registration.ok());
  REQUIRE(SyncPull(connection).ok());

  cluster.Restart(0);
  REQUIRE(initializer->Init(zeros).ok());  // registers with the new incarnation again itself
  ServerView view;
  view.MarkFailed(0);
  view.MarkJoining(0);
  view.MarkLive(0);
  view.MarkFailed(1);  // server 0 serves its keys alone
  failover.Merge(view, "the test says so");  // not armed yet: nothing is revived
  failover.Arm();
  const absl::Status pulled = SyncPull(connection);
  INFO(pulled);
  CHECK(pulled.ok());
  CHECK(connection.registrations() == 2);
  connection.StopAndCancel();
  connection.AwaitIdle();
}

}  // namespace
}  // namespace shardps::testing
