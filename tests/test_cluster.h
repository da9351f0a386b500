// Test harness: servers hosted in-process on 127.0.0.1 over real gRPC, and
// clients connected to them.
#ifndef SHARDPS_TESTS_TEST_CLUSTER_H_
#define SHARDPS_TESTS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/layout.h"
#include "proto/shardps.grpc.pb.h"
#include "server/ps_server_host.h"
#include "worker/ps_client.h"

namespace shardps::testing {

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

class TestCluster {
 public:
  // Starts options.job.num_servers servers; host i gets server_id i.
  explicit TestCluster(const ServerOptions& options, HostOptions host = HostOptions()) : options_(options) {
    host.address = "127.0.0.1";
    for (int s = 0; s < options.job.num_servers; ++s) {
      ServerOptions o = options;
      o.server_id = s;
      auto core = ParameterServer::Create(o, &clock_);
      if (!core.ok()) throw std::runtime_error(std::string(core.status().message()));
      auto h = PsServerHost::Start(host, *std::move(core));
      if (!h.ok()) throw std::runtime_error(std::string(h.status().message()));
      hosts_.push_back(*std::move(h));
    }
  }

  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (const auto& h : hosts_) out.push_back(absl::StrCat("127.0.0.1:", h->port()));
    return out;
  }
  ParameterServer* core(int s) { return hosts_[s]->core(); }
  PsServerHost* host(int s) { return hosts_[s].get(); }

  ClientOptions ClientFor(int rank, const Layout& layout = SmallLayout()) const {
    ClientOptions c;
    c.servers = Addresses();
    c.rank = rank;
    c.job = options_.job;
    c.layout = layout;
    c.max_attempts = 3;
    c.initial_backoff = absl::Milliseconds(20);
    c.heartbeat_interval = absl::Milliseconds(100);
    return c;
  }

  // A connected, registered client.
  std::unique_ptr<PsClient> Worker(int rank, const Layout& layout = SmallLayout()) const {
    auto client = PsClient::Connect(ClientFor(rank, layout));
    if (!client.ok()) throw std::runtime_error(std::string(client.status().message()));
    auto step = (*client)->Register();
    if (!step.ok()) throw std::runtime_error(std::string(step.status().message()));
    return *std::move(client);
  }

  std::unique_ptr<wire::ParameterService::Stub> RawStub(int s) const {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(512 << 20);
    return wire::ParameterService::NewStub(
        grpc::CreateCustomChannel(Addresses()[s], grpc::InsecureChannelCredentials(), args));
  }

 private:
  ServerOptions options_;
  RealClock clock_;
  std::vector<std::unique_ptr<PsServerHost>> hosts_;
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

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TEST_CLUSTER_H_
