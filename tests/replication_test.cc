// DESIGN.md "Replication" (--replicas=2, sync): every key on two servers,
// the backup updated after each step before any worker reads it, a killed
// server's keys served by its backup with no step lost and the weights of a
// run without the kill, bit for bit; a server named failed steps down. Real
// gRPC on 127.0.0.1 between workers and servers and between servers.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>


#include "common/metrics_http.h"
#include "common/tensor_frame.h"
#include "tests/lockstep_training.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

constexpr int kServers = 3;
constexpr int kWorkers = 2;
constexpr int kSteps = 8;

ServerOptions ReplicatedOptions() {
  ServerOptions o = SyncOptions(kServers, kWorkers);
  o.job.replicas = 2;
  o.optimizer.lr = 0.5;
  o.optimizer.momentum = 0.9;  // a slot that the backup must have too
  return o;
}

// The job as a worker of SmallLayout() registers it with a server core.
JobView JobOfSmallLayout() {
  JobView v = ReplicatedOptions().job;
  v.layout_hash = LayoutHash(SmallLayout());
  return v;
}

// The last key of SmallLayout() whose primary is server `s` (server s + 1 backs it up).
ChunkInfo KeyOfServer(int s) {
  const KeyMap map = *KeyMap::Build(SmallLayout(), kServers, kSmallPartitionBytes);
  const ChunkInfo* found = nullptr;
  for (const ChunkInfo& c : map.chunks()) {
    if (c.server == s) found = &c;
  }
  REQUIRE(found != nullptr);
  return *found;
}

// A Replicate request from server 0 naming `key` at version 5, its values still to set.
wire::ReplicateRequest OneKeyRequest(const ChunkKey& key) {
  wire::ReplicateRequest req;
  req.set_from_server(0);
  wire::ReplicaKey* k = req.add_keys();
  k->mutable_key()->set_tensor(key.tensor);
  k->mutable_key()->set_chunk(key.chunk);
  k->set_version(5);
  return req;
}

// kSteps steps of both workers (tests/lockstep_training.h); at step
// `kill_at`, after worker 0's push and before worker 1's, `kill` runs.
std::vector<std::vector<float>> Train(TestCluster& cluster, int kill_at, const std::function<void()>& kill,
                                      bool sync = true) {
  return TrainInLockstep(cluster, kWorkers, kSteps, {{kill_at, kill}}, sync);
}

bool Bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() || std::memcmp(a[t].data(), b[t].data(), a[t].size() * 4) != 0) return false;
  }
  return true;
}

TEST_CASE("replication: every key has two copies, and each step reaches the backup", "[replication]") {
  TestCluster cluster(ReplicatedOptions());
  Train(cluster, -1, [] {});
  for (int s = 0; s < kServers; ++s) {
    const ServerStats st = cluster.core(s)->Stats();
    INFO("server " << s);
    CHECK(st.max_version == kSteps);
    CHECK(st.min_version == kSteps);  // backups' keys included
    CHECK(st.replica_keys_installed > 0);
    CHECK(st.replica_keys_sent > 0);
    CHECK(st.under_replicated_keys == 0);
    CHECK(st.view.Pristine());
    CHECK(st.push_acks_held == 0);  // workers that pull every step never wait for a push's answer
  }
}

TEST_CASE("replication: a killed server costs no step and changes no bit of the weights", "[replication]") {
  std::vector<std::vector<float>> calm;
  {
    TestCluster cluster(ReplicatedOptions());
    calm = Train(cluster, -1, [] {});
  }
  for (int killed : {1, 2}) {
    for (int at : {0, 3}) {
      INFO("server " << killed << " killed at step " << at);
      HostOptions host;
      host.metrics_port = 0;
      TestCluster cluster(ReplicatedOptions(), host);
      const auto w = Train(cluster, at, [&] { cluster.Kill(killed); });
      CHECK(Bitwise(w, calm));
      const int backup = (killed + 1) % kServers;
      const ServerStats st = cluster.core(backup)->Stats();
      CHECK(st.view.Failed(killed));
      CHECK(st.max_version == kSteps);
      // The killed server's keys now have one copy, on its backup; the
      // keys the killed server backed up have one copy on their primary.
      CHECK(st.under_replicated_keys > 0);
      CHECK(cluster.core((killed + 2) % kServers)->Stats().under_replicated_keys > 0);
      const std::string metrics = ScrapeLoopbackMetrics(cluster.host(backup)->metrics_port());
      CHECK_THAT(metrics, Catch::Contains(absl::StrCat("shardps_under_replicated_keys{server=\"", backup, "\"} ",
                                                       st.under_replicated_keys)));
      CHECK_THAT(metrics, Catch::Contains(absl::StrCat("shardps_failed_servers{server=\"", backup, "\"} 1")));
    }
  }
}

TEST_CASE("replication: a worker that registers again leaves out the servers it knows failed", "[replication]") {
  // A worker lines up with the job again (ps_worker does after "unknown
  // session", say) after server 2 was killed and taken for failed. Server 2's
  // keys are served by server 0 now: registering with it, or sending it the
  // Init that follows, could only wait out --server_timeout and fail (each
  // did in tests/chaos:replication_chaos_test).
  ServerOptions o = ReplicatedOptions();
  o.job.mode = Mode::kAsync;
  o.job.num_workers = 1;
  TestCluster cluster(o);
  std::unique_ptr<PsClient> worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  std::vector<std::vector<float>> w = Zeros(SmallLayout());
  REQUIRE(PushAll(*worker, 0, GradientOf(0, 0)).ok());
  cluster.Kill(2);
  REQUIRE(PushAll(*worker, 1, GradientOf(0, 1)).ok());  // finds server 2 gone; server 0 takes its keys
  REQUIRE(PullAll(*worker, 2, w).ok());
  REQUIRE(cluster.core(0)->View().Failed(2));
  const absl::StatusOr<int64_t> again = worker->Register();
  INFO(again.status());
  REQUIRE(again.ok());
  const absl::Status init = worker->Init(Zeros(SmallLayout()));  // as ps_worker's Rejoin does
  INFO(init);
  REQUIRE(init.ok());
  REQUIRE(PushAll(*worker, 2, GradientOf(0, 2)).ok());
  REQUIRE(PullAll(*worker, 3, w).ok());
  CHECK(cluster.core(0)->Stats().max_version == 3);  // server 2's keys took all three pushes on server 0
}

TEST_CASE("replication: a backup refuses its keys while their primary serves them", "[replication]") {
  TestCluster cluster(ReplicatedOptions());
  std::unique_ptr<PsClient> worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  // Server 1 backs up server 0's keys: a push to it is refused, naming both.
  absl::StatusOr<Registration> reg = cluster.core(1)->Register(0, JobOfSmallLayout(), std::nullopt);
  REQUIRE(reg.ok());
  const ChunkInfo of_server_0 = KeyOfServer(0);
  std::vector<float> g(of_server_0.length, 1.0f);
  ChunkPayload chunk{of_server_0.key, wire::DTYPE_FLOAT32,
                     {absl::string_view(reinterpret_cast<const char*>(g.data()), g.size() * 4)}};
  auto refused = cluster.core(1)->Push(reg->session_id, 0, {chunk});
  REQUIRE(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("as a backup of server 0"));

  SECTION("once server 0 is reported failed, server 1 serves them") {
    ServerView failed;
    failed.MarkFailed(0);
    cluster.core(1)->NoteView(failed);
    CHECK(cluster.core(1)->Push(reg->session_id, 0, {chunk}).ok());
  }
  SECTION("server 0, named failed, steps down, and its backup refuses its updates") {
    ServerView failed;
    failed.MarkFailed(0);
    cluster.core(0)->NoteView(failed);
    absl::StatusOr<Registration> own = cluster.core(0)->Register(0, JobOfSmallLayout(), std::nullopt);
    REQUIRE(own.ok());
    auto stepped_down = cluster.core(0)->Push(own->session_id, 0, {chunk});
    REQUIRE(stepped_down.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(stepped_down.status().message()), Catch::Contains("stepped down"));
    cluster.core(1)->NoteView(failed);
    ReplicaUpdate u{of_server_0.key, 5, std::make_shared<const std::vector<float>>(g),
                    {std::vector<float>(g.size(), 0.0f)}};
    absl::Status taken_over = cluster.core(1)->ApplyReplica(0, 0, {u});
    REQUIRE(taken_over.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(taken_over.message()), Catch::Contains("must step down"));
  }
  SECTION("malformed updates are refused, naming the fault, and the server serves on") {
    auto update = [&](ChunkKey key, size_t length, size_t slots) {
      return ReplicaUpdate{key, 5, std::make_shared<const std::vector<float>>(length, 1.0f),
                           std::vector<std::vector<float>>(slots, std::vector<float>(length, 0.0f))};
    };
    const int64_t refused_before = cluster.core(1)->Stats().refused;
    absl::Status s = cluster.core(1)->ApplyReplica(0, 0, {update(of_server_0.key, g.size() + 1, 1)});
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("wrong size"));
    s = cluster.core(1)->ApplyReplica(0, 0, {update(of_server_0.key, g.size(), 0)});  // momentum has a slot
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    s = cluster.core(1)->ApplyReplica(2, 0, {update(of_server_0.key, g.size(), 1)});
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("which it does not serve"));
    s = cluster.core(1)->ApplyReplica(0, 0, {update(ChunkKey{9, 0}, g.size(), 1)});
    CHECK(s.code() == absl::StatusCode::kNotFound);
    // Over the wire: weights that are not whole floats.
    wire::ReplicateRequest req = OneKeyRequest(of_server_0.key);
    req.mutable_keys(0)->set_weights("12345");
    grpc::ClientContext ctx;
    wire::ReplicateResponse resp;
    const grpc::Status wire_status = cluster.RawStub(1)->Replicate(&ctx, req, &resp);
    CHECK(wire_status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(wire_status.error_message(), Catch::Contains("not a multiple of 4"));
    CHECK(cluster.core(1)->Stats().refused == refused_before + 5);
    CHECK(cluster.core(1)->Stats().replica_keys_installed == 0);
    // Of a timeline this server has not rewound to yet: tried again later.
    s = cluster.core(1)->ApplyReplica(0, 1, {update(of_server_0.key, g.size(), 1)});
    CHECK(s.code() == absl::StatusCode::kOutOfRange);
    CHECK_THAT(std::string(s.message()), Catch::Contains("has not rewound to timeline 1"));
    CHECK(cluster.core(1)->Stats().replica_keys_installed == 0);
    CHECK(cluster.core(1)->ApplyReplica(0, 0, {update(of_server_0.key, g.size(), 1)}).ok());
    CHECK(cluster.core(1)->Stats().replica_keys_installed == 1);
  }
}

// ssp too: a worker's clock on a server counts the keys that server serves,
// not those it holds as a backup (it would never finish a step there).
TEST_CASE("replication: async and ssp lose no push when a server is killed", "[replication]") {
  for (auto [mode, killed] : {std::pair{Mode::kAsync, 1}, {Mode::kAsync, 2}, {Mode::kSsp, 1}, {Mode::kSsp, 2}}) {
    INFO(ModeName(mode) << ": server " << killed << " killed at step 3");
    ServerOptions o = ReplicatedOptions();
    o.job.mode = mode;
    o.async_lr_scaling = AsyncLrScaling::kNone;
    TestCluster cluster(o);
    Train(cluster, 3, [&] { cluster.Kill(killed); }, /*sync=*/false);
    // Every key has counted every push of both workers on the server that
    // serves it now, the killed server's keys on its backup included.
    for (int s = 0; s < kServers; ++s) {
      if (s == killed) continue;
      const ServerStats st = cluster.core(s)->Stats();
      CHECK(st.max_version == kSteps * kWorkers);
    }
    CHECK(cluster.core((killed + 1) % kServers)->Stats().min_version == kSteps * kWorkers);
  }
}

TEST_CASE("replication: bad flags are refused with the reason", "[replication]") {
  ServerOptions o = ReplicatedOptions();
  o.job.replicas = 4;
  CHECK(ParameterServer::Create(o, nullptr).status().code() == absl::StatusCode::kInvalidArgument);
  o.job.replicas = 3;
  auto three = ParameterServer::Create(o, nullptr);
  REQUIRE(three.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(three.status().message()), Catch::Contains("at most 2 copies"));

  TestCluster cluster(ReplicatedOptions());
  ClientOptions c = cluster.ClientFor(0);
  c.failover_timeout = absl::ZeroDuration();
  auto client = PsClient::Connect(c);
  REQUIRE(client.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(client.status().message()), Catch::Contains("server_timeout_for_failover"));
  c = cluster.ClientFor(0);
  c.job.replicas = 4;
  CHECK(PsClient::Connect(c).status().code() == absl::StatusCode::kInvalidArgument);

  for (const absl::Duration connect : {absl::ZeroDuration(), absl::Seconds(21)}) {
    ReplicaLinkOptions link;
    link.connect_timeout = connect;
    auto made = GrpcReplicaLink::Create(link);
    REQUIRE(made.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(made.status().message()), Catch::Contains("--peer_connect_timeout"));
  }
}

TEST_CASE("replication: a raw Replicate frame that does not add up is refused, a good one installed",
          "[replication]") {
  TestCluster cluster(ReplicatedOptions());
  std::unique_ptr<PsClient> worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  const ChunkInfo of_server_0 = KeyOfServer(0);  // server 1 backs it up
  const int64_t n = of_server_0.length;
  const std::string weights(n * 4, '\0'), slot(n * 4, '\0');
  // A header for the key with `values` and `slots` declared.
  auto header = [&](int64_t values, int slots) {
    wire::ReplicateRequest req = OneKeyRequest(of_server_0.key);
    req.mutable_keys(0)->set_raw_values(values);
    req.mutable_keys(0)->set_raw_slots(slots);
    return req;
  };
  const int64_t refused_before = cluster.core(1)->Stats().refused;
  auto refused = [&](const grpc::ByteBuffer& frame, const char* why) {
    const grpc::Status s = cluster.RawCall(1, kRawReplicateMethod, frame);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains(why));
  };
  refused(EncodeFrame(header(2 * n, 1), {weights, slot}), "the frame carries");  // more declared than sent
  refused(EncodeFrame(header(n, 0), {weights, slot}), "the frame carries");      // more sent than declared
  refused(EncodeFrame(header(-1, 1), {weights, slot}), "needs raw_values");
  refused(EncodeFrame(header(n, 1000000), {weights, slot}), "raw_slots");
  wire::ReplicateRequest inline_weights = header(n, 1);
  inline_weights.mutable_keys(0)->set_weights(weights);
  refused(EncodeFrame(inline_weights, {weights, slot}), "no weights or slots in the header");
  const grpc::Slice junk("xy", 2);
  refused(grpc::ByteBuffer(&junk, 1), "");
  CHECK(cluster.core(1)->Stats().refused == refused_before + 6);
  CHECK(cluster.core(1)->Stats().replica_keys_installed == 0);
  // A frame that adds up (weights and the momentum slot) is installed.
  REQUIRE(cluster.RawCall(1, kRawReplicateMethod, EncodeFrame(header(n, 1), {weights, slot})).ok());
  CHECK(cluster.core(1)->Stats().replica_keys_installed == 1);
}

}  // namespace
}  // namespace shardps::testing
