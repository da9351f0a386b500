// Test harness: servers hosted in-process on 127.0.0.1 over real gRPC, and
// clients connected to them, all on one injected clock (a ManualClock makes
// liveness, timeout and backoff tests independent of real time).
#ifndef SHARDPS_TESTS_TEST_CLUSTER_H_
#define SHARDPS_TESTS_TEST_CLUSTER_H_

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/layout.h"
#include "common/rpc_metadata.h"
#include "proto/shardps.grpc.pb.h"
#include "server/grpc_replica_link.h"
#include "server/ps_server_host.h"
#include "server/replica_joiner.h"
#include "server/view_metadata.h"
#include "client/ps_client.h"

namespace shardps::testing {

// One unary call of `method` through gRPC's generic stub, with `ctx` as
// the caller set it up (deadline, metadata), waited for on this thread.
inline grpc::Status GenericUnaryCall(grpc::GenericStub& stub, grpc::ClientContext* ctx, const std::string& method,
                                     const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(ctx, method, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  if (!cq.Next(&tag, &ok)) throw std::runtime_error("GenericUnaryCall: the completion queue shut down");
  return status;
}

// Two tensors cut into 16-byte chunks (4 floats), so both servers own keys.
inline Layout SmallLayout() { return Layout{{{"w", {3, 5}}, {"b", {5}}}}; }
inline constexpr int64_t kSmallPartitionBytes = 16;

inline ServerOptions SyncOptions(int num_servers, int num_workers) {
  ServerOptions o;
  o.job.mode = Mode::kSync;
  o.job.num_servers = num_servers;
  o.job.num_workers = num_workers;
  o.job.partition_bytes = kSmallPartitionBytes;
  o.optimizer.lr = 1.0;  // w -= mean gradient: exact with small integers.
  o.worker_timeout = absl::Seconds(30);
  return o;
}

// An async job of one server and `workers` workers, lr 1, plain SGD.
inline ServerOptions AsyncOptions(int workers) {
  ServerOptions o = SyncOptions(1, workers);
  o.job.mode = Mode::kAsync;
  return o;
}

class TestCluster {
 public:
  // Starts options.job.num_servers servers; host i gets server_id i. Every
  // server and client uses `clock` (the real clock when null), which must
  // outlive the cluster.
  // With options.job.replicas > 1 each server forwards its updates to its
  // backup over real gRPC (server/grpc_replica_link.h), and takes a backup
  // that has not answered for `replica_failover` for failed.
  explicit TestCluster(const ServerOptions& options, HostOptions host = HostOptions(), Clock* clock = nullptr,
                       absl::Duration replica_failover = absl::Milliseconds(500))
      : options_(options),
        host_(host),
        clock_(clock != nullptr ? clock : &real_clock_),
        replica_failover_(replica_failover) {
    host_.address = "127.0.0.1";
    links_.resize(options.job.num_servers);
    joiners_.resize(options.job.num_servers);
    for (int s = 0; s < options.job.num_servers; ++s) hosts_.push_back(StartServer(s, 0));
  }
  // The links call into the cores: each goes after its host's shutdown and
  // before its core.
  ~TestCluster() {
    for (size_t s = 0; s < hosts_.size(); ++s) Kill(static_cast<int>(s));
  }

  // Stops server s for good (its port then refuses connections).
  void Kill(int s) {
    joiners_[s].reset();
    if (hosts_[s] != nullptr) hosts_[s]->Shutdown(absl::ZeroDuration());
    links_[s].reset();
    hosts_[s].reset();
  }

  // Stops server s as a crash would leave it (no final checkpoint when
  // options.checkpoint_on_shutdown is false) and starts a new incarnation on
  // the same port, which restores from options.checkpoint_dir.
  void Restart(int s) {
    const int port = hosts_[s]->port();
    Kill(s);
    hosts_[s] = StartServer(s, port);
  }

  // Stops server s (if running) and starts a new one on its port that joins the running
  // job as ps_server --join does (server/replica_joiner.h): no restore, its
  // keys copied from the servers that serve them. Needs replicas > 1. With
  // `new_port`, on a new port instead (a spare on another machine): its
  // --join list names it there; every other server and client keeps the
  // address it had.
  void RestartJoining(int s, bool new_port = false) {
    const int port = new_port ? 0 : ports_[s];  // server s may have been killed already
    Kill(s);
    hosts_[s] = StartServer(s, port, /*join=*/true);
    const std::vector<std::string> addresses = Addresses();
    ParameterServer* core = hosts_[s]->core();
    links_[s]->SetPeers(addresses);
    ReplicaJoinerOptions j;
    j.peers = addresses;
    j.join_at_start = true;
    j.credentials = grpc::InsecureChannelCredentials();
    j.poll = absl::Milliseconds(20);
    joiners_[s] = std::make_unique<ReplicaJoiner>(core, j);
  }

  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (size_t s = 0; s < hosts_.size(); ++s) {
      out.push_back(absl::StrCat("127.0.0.1:", hosts_[s] ? hosts_[s]->port() : ports_[s]));
    }
    return out;
  }
  ParameterServer* core(int s) { return hosts_[s]->core(); }
  PsServerHost* host(int s) { return hosts_[s].get(); }
  Clock* clock() { return clock_; }

  ClientOptions ClientFor(int rank, const Layout& layout = SmallLayout()) const {
    ClientOptions c;
    c.servers = Addresses();
    c.rank = rank;
    c.job = options_.job;
    c.layout = layout;
    c.initial_backoff = absl::Milliseconds(20);
    c.server_timeout = absl::Seconds(2);
    c.heartbeat_interval = absl::Milliseconds(100);
    c.clock = clients_on_real_clock_ ? &real_clock_ : clock_;
    return c;
  }

  // Clients made from now on keep time on the real clock while the servers
  // stay on the cluster's (a manual clock, say, that holds their ticks back).
  void PutClientsOnRealClock() { clients_on_real_clock_ = true; }

  // A connected, registered client.
  std::unique_ptr<PsClient> Worker(int rank, const Layout& layout = SmallLayout()) const {
    return Worker(ClientFor(rank, layout));
  }
  // A registered client with `options` (ClientFor()'s, changed).
  std::unique_ptr<PsClient> Worker(const ClientOptions& options) const {
    auto client = PsClient::Connect(options);
    if (!client.ok()) throw std::runtime_error(std::string(client.status().message()));
    auto step = (*client)->Register();
    if (!step.ok()) throw std::runtime_error(std::string(step.status().message()));
    return *std::move(client);
  }

  // One call of any method to server s through gRPC's generic stub, as a
  // peer that is not a ShardPS client may make it: the raw framing of
  // common/tensor_frame.h, or bytes that are not a message at all. The
  // answer goes to *response and its incarnation metadata to *incarnation
  // when given.
  grpc::Status RawCall(int s, const std::string& method, const grpc::ByteBuffer& request,
                       grpc::ByteBuffer* response = nullptr, std::string* incarnation = nullptr) const {
    grpc::GenericStub stub(grpc::CreateChannel(Addresses()[s], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    grpc::ByteBuffer ignored;
    const grpc::Status status = GenericUnaryCall(stub, &ctx, method, request, response != nullptr ? response : &ignored);
    if (incarnation != nullptr) {
      const auto& trailing = ctx.GetServerTrailingMetadata();
      auto it = trailing.find(kIncarnationKey);
      *incarnation = it == trailing.end() ? "" : std::string(it->second.data(), it->second.size());
    }
    return status;
  }

  std::unique_ptr<wire::ParameterService::Stub> RawStub(int s) const {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(512 << 20);
    return wire::ParameterService::NewStub(
        grpc::CreateCustomChannel(Addresses()[s], grpc::InsecureChannelCredentials(), args));
  }
  // Server s's Admin status over real gRPC; nullopt when the call fails.
  std::optional<wire::ServerStatus> AdminStatus(int s) const {
    wire::AdminRequest req;
    req.set_action(wire::ADMIN_STATUS);
    wire::AdminResponse resp;
    grpc::ClientContext ctx;
    if (!RawStub(s)->Admin(&ctx, req, &resp).ok()) return std::nullopt;
    return resp.status();
  }

 private:
  std::unique_ptr<PsServerHost> StartServer(int s, int port, bool join = false) {
    ServerOptions o = options_;
    o.server_id = s;
    o.join = join;
    if (o.job.replicas > 1) {
      links_[s] = *GrpcReplicaLink::Create(ReplicaLinkOptions{replica_failover_});
      o.replica_link = links_[s].get();
    }
    auto core = ParameterServer::Create(o, clock_);
    if (!core.ok()) throw std::runtime_error(std::string(core.status().message()));
    if (links_[s] != nullptr) {  // as ps_server_main does
      ParameterServer* served = core->get();
      links_[s]->SetViewExchange([served] { return ViewMetadata(*served); },
                                 [served](const ReceivedMetadata& t) { NoteViewMetadata(t, *served); });
    }
    HostOptions h = host_;
    h.port = port;
    auto started = PsServerHost::Start(h, *std::move(core), clock_);
    if (!started.ok()) throw std::runtime_error(std::string(started.status().message()));
    ports_.resize(std::max<size_t>(ports_.size(), s + 1));
    ports_[s] = (*started)->port();
    return *std::move(started);
  }

  const ServerOptions options_;
  HostOptions host_;
  mutable RealClock real_clock_;  // stateless; clients of a const cluster take it
  bool clients_on_real_clock_ = false;
  Clock* const clock_;
  const absl::Duration replica_failover_;
  std::vector<std::unique_ptr<GrpcReplicaLink>> links_;  // before hosts_: destroyed after them
  std::vector<std::unique_ptr<PsServerHost>> hosts_;
  std::vector<std::unique_ptr<ReplicaJoiner>> joiners_;  // after hosts_: destroyed before them
  std::vector<int> ports_;  // a killed server's too
};

// Zero-initialised weights for every tensor of `layout`.
inline std::vector<std::vector<float>> Zeros(const Layout& layout) {
  std::vector<std::vector<float>> w;
  for (const TensorSpec& t : layout.tensors) w.emplace_back(t.NumElements(), 0.0f);
  return w;
}

// Every value of every tensor of SmallLayout() set to `v`.
inline std::vector<std::vector<float>> Filled(float v) {
  auto w = Zeros(SmallLayout());
  for (auto& t : w) std::fill(t.begin(), t.end(), v);
  return w;
}

// Rank r's gradient of SmallLayout() at `step`: values whose float sums
// depend on their order (a sync step is bitwise only when summed in rank
// order).
inline std::vector<std::vector<float>> GradientOf(int rank, int64_t step) {
  auto g = Zeros(SmallLayout());
  for (size_t t = 0; t < g.size(); ++t) {
    for (size_t i = 0; i < g[t].size(); ++i) g[t][i] = 0.1f * (rank + 1) + 0.013f * step - 0.007f * i + 0.3f * t;
  }
  return g;
}

// Pushes (pulls) both tensors of SmallLayout().
inline absl::Status PushAll(PsClient& c, int64_t step, const std::vector<std::vector<float>>& g) {
  return c.Push(step, {{0, g[0].data()}, {1, g[1].data()}});
}
inline absl::Status PullAll(PsClient& c, int64_t step, std::vector<std::vector<float>>& w) {
  return c.Pull(step, {{0, w[0].data()}, {1, w[1].data()}});
}

// Initialises SmallLayout()'s weights to zero, then runs `steps` steps of
// gradient 1 (push, then pull the next step's weights); the last weights pulled.
inline absl::StatusOr<std::vector<std::vector<float>>> TrainOnes(PsClient& worker, int64_t steps) {
  if (absl::Status s = worker.Init(Zeros(SmallLayout())); !s.ok()) return s;
  auto w = Zeros(SmallLayout());
  for (int64_t step = 0; step < steps; ++step) {
    if (absl::Status s = PushAll(worker, step, Filled(1)); !s.ok()) return s;
    if (absl::Status s = PullAll(worker, step + 1, w); !s.ok()) return s;
  }
  return w;
}

inline bool AllEqual(const std::vector<std::vector<float>>& w, float v) {
  for (const auto& t : w) {
    for (float x : t) {
      if (x != v) return false;
    }
  }
  return true;
}

// Waits (real time, up to `limit`) until `server` holds exactly `n` pulls
// waiting for their version; false if it never does. Lets a test know that
// a pull reached the server and was held, without sleeping a guessed time.
inline bool AwaitWaitingPulls(ParameterServer* server, int64_t n, absl::Duration limit = absl::Seconds(20)) {
  for (const absl::Time deadline = absl::Now() + limit; absl::Now() < deadline;) {
    if (server->Stats().waiting_pulls == n) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TEST_CLUSTER_H_
