// PsClient over gRPC (client/ps_client.h), internal to the client library:
// a ServerConnection per server (channels, retries, re-registration,
// heartbeats), requests built by client/ps_requests.h, joining the job by
// client/job_alignment.h (client/grpc_ps_client.cc), and the transfer
// schedule of pushes and pulls (client/grpc_transfers.cc).
#ifndef SHARDPS_CLIENT_GRPC_PS_CLIENT_H_
#define SHARDPS_CLIENT_GRPC_PS_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "client/checkpoint_relay.h"
#include "client/async_prefetch.h"
#include "client/delayed_executor.h"
#include "client/failover.h"
#include "client/job_alignment.h"
#include "client/ps_client.h"
#include "client/ps_requests.h"
#include "client/server_connection.h"
#include "client/transfer_queue.h"
#include "common/fanout.h"
#include "common/key_partition.h"

namespace shardps {

struct RowsPushPart;  // one PushRows request's fields (client/grpc_rows.cc)
struct RowsPull;      // one PullRows request's
template <typename Value>
struct PlannedRows;   // one table's rows planned for the wire
// Where a part of a PullRows answer goes: `values` floats at `out`.
struct PulledPlace {
  float* out;
  size_t values;
};

// Runs fn(done) and waits for done to be called; returns its status.
absl::Status Blocking(const std::function<void(PsClient::Done)>& fn);

// Collects the answers of several calls; runs `done` once, after the last,
// with the first error (a rejoin status before any other).
class Fanout : public CallFanout {
 public:
  Fanout(int calls, PsClient::Done done) : CallFanout(calls, std::move(done), KeepFirstError) {}
};

// The budgets of the push queue and of the fetch queue
// (client/grpc_transfers.cc says why these).
TransferQueue::Budget PushBudget(const ClientOptions& options);
TransferQueue::Budget FetchBudget(const ClientOptions& options);
// The most bytes one push request (one fetch) carries: push_request_bytes
// (fetch_request_bytes), a partition's at least.
int64_t PushRequestBytes(const ClientOptions& options);
int64_t FetchRequestBytes(const ClientOptions& options);
// With ClientOptions::first_weights_lane: how many of the layout's first
// tensors are the first weights, those that begin within the first 4% of its
// elements (bench/scaling's resnet50/10: 39 of its 108 tensors, 0.44 MB of
// 10.2).
uint32_t FirstWeightsTensors(const Layout& layout);

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(const ClientOptions& options, KeyMap map, std::shared_ptr<grpc::ChannelCredentials> credentials);
  ~GrpcPsClient() override { Shutdown(); }

  absl::StatusOr<int64_t> Register() override;
  absl::Status Init(const std::vector<std::vector<float>>& weights, bool* applied = nullptr) override;
  void PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) override;
  void PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) override;
  void PushThenPull(int64_t step, std::vector<TensorIn> grads, std::vector<TensorOut> weights, Done pushed,
                    Done pulled) override;
  void PushRowsManyAsync(int64_t step, std::vector<Rows<const float>> tables, Done done) override;
  void PullRowsManyAsync(int64_t step, std::vector<Rows<float>> tables, Done done) override;
  void Shutdown() override;
  ClientStats Stats() const override;

 private:
  // The servers a registration or an Init goes to: every one, but with
  // replication (once armed) not those this worker's view has failed. Their
  // keys are served by their backups; one that comes back is registered
  // with once it is live again (Failover::Merge).
  std::vector<int> ServersNotFailed() const;
  // Registers with `servers` in parallel (each waits up to server_timeout).
  absl::StatusOr<std::vector<ServerJoinView>> RegisterWith(const std::vector<int>& servers,
                                                           std::optional<ResumeAt> resume);
  absl::Status RewindAll(const JoinPlan& plan);
  CallSpec TransferSpec(const char* what, absl::Duration timeout, Lane lane) const {
    CallSpec spec{what, timeout, options_.job.mode == Mode::kAsync ? OnAbort::kRegisterAgain : OnAbort::kRejoin};
    spec.fails_over = true;
    spec.lane = lane;
    return spec;
  }
  // Sends the pushes the push queue starts together (its ids in
  // waiting_pushes_) in as few requests as carry them (MergePushes); each
  // push's caller learns the status of the request that carried it.
  // `finished` once all are answered.
  void SendWaitingPushes(std::vector<uint64_t> ids, std::function<void()> finished);
  // Sends one push request (its turn in the push queue has come).
  void SendPush(std::shared_ptr<RawPush> req, absl::Time queued, std::function<void()> finished,
                std::shared_ptr<Fanout> fanout);
  // The parts of a pull, each in line as its whole transfer (its first tensor).
  absl::StatusOr<std::vector<PullPart>> PullParts(int64_t step, const std::vector<TensorOut>& tensors) const;
  // PullAsync; `after_own_push` (async, ssp): the server answers once this
  // worker's push of step - 1 is applied (PullRequest.after_own_push).
  void StartPull(int64_t step, std::vector<TensorOut> tensors, bool after_own_push, Done done);
  // Async and ssp by default: the pull of `weights` for step + 1 holds its
  // places now and fetches once the push of `grads` is acknowledged.
  void PushThenFetch(int64_t step, std::vector<TensorIn> grads, std::vector<TensorOut> weights, Done pushed,
                     Done pulled);
  // Waits (sync, ssp) until the part's weights are ready, then queues its
  // fetch in the place it reserved (now, or before: `ticket`); fetches at
  // once where pulls do not wait (async).
  void AwaitThenFetch(int64_t step, std::shared_ptr<PullPart> part, std::shared_ptr<Fanout> fanout,
                      std::optional<TransferQueue::Ticket> ticket = std::nullopt);
  // The fetch, as the pull queue starts it.
  TransferQueue::Start FetchStart(std::shared_ptr<PullPart> part, std::shared_ptr<Fanout> fanout);
  void SendFetch(std::shared_ptr<PullPart> part, absl::Time queued, std::function<void()> finished,
                 std::shared_ptr<Fanout> fanout);
  // A request's place in line: its step, the first tensor of its transfer,
  // then its server in this worker's ring.
  TransferPriority PriorityOf(int64_t step, uint32_t first_tensor, int server) const {
    const int servers = static_cast<int>(connections_.size());
    return {step, first_tensor, ((server - options_.rank - 1) % servers + servers) % servers};
  }
  // Records a request's time in line and in flight on the trace.
  void TraceTransfer(const char* what, int server, uint32_t first_tensor, int64_t step, int64_t bytes,
                     absl::Time queued, absl::Time sent) const;
  void HeartbeatLoop(absl::Time start);  // heartbeats due from `start` on
  // The dim of `table`, or INVALID_ARGUMENT naming the layout's tables.
  absl::StatusOr<int> TableDim(uint32_t table) const;
  // Server s's requests for a push (pull) of the tables `planned`, added to
  // `reqs`: every table in as few requests as the message limit allows.
  absl::Status PlanPushes(int64_t step, int s, const std::vector<PlannedRows<const float>>& planned,
                          std::vector<std::pair<int, std::shared_ptr<RowsPushPart>>>& reqs) const;
  void PlanPulls(int64_t step, int s, const std::vector<PlannedRows<float>>& planned,
                 std::vector<std::pair<int, std::shared_ptr<RowsPull>>>& reqs) const;
  // Sends one PushRows request to server `s` (its turn in the push queue
  // has come; `finished` gives the turn back).
  void SendRows(int s, std::shared_ptr<RowsPushPart> part, std::shared_ptr<Fanout> fanout,
                std::function<void()> finished);
  // Sends one PullRows request to server `s`, its answer's rows to the
  // places `into` names in order (kept alive by `keep`), as the pull queue
  // starts it.
  void SendRowsPull(int s, std::shared_ptr<wire::PullRowsRequest> req, std::vector<PulledPlace> into,
                    wire::DType dtype, std::shared_ptr<Fanout> fanout, std::shared_ptr<const void> keep,
                    std::function<void()> finished);

  const ClientOptions options_;
  RealClock real_clock_;
  Clock* const clock_;
  const KeyMap key_map_;
  const RequestBuilder builder_;
  const uint32_t first_weights_tensors_;  // with first_weights_lane, else 0
  DelayedExecutor executor_;
  CheckpointRelay checkpoint_relay_;  // the newest checkpoint step announced (client/checkpoint_relay.h)
  std::vector<std::unique_ptr<ServerConnection>> connections_;
  std::unique_ptr<Failover> failover_;  // with --replicas > 1
  TransferQueue push_queue_, pull_queue_;
  // Push requests in the push queue, by the id it starts them with.
  struct WaitingPush {
    std::shared_ptr<RawPush> request;
    std::shared_ptr<Fanout> fanout;  // of the PushAsync call it is part of
    absl::Time queued;
  };
  absl::Mutex waiting_mu_;
  absl::flat_hash_map<uint64_t, WaitingPush> waiting_pushes_ ABSL_GUARDED_BY(waiting_mu_);
  uint64_t next_push_id_ ABSL_GUARDED_BY(waiting_mu_) = 0;
  AsyncPrefetch prefetch_;  // async's next-step weights, fetched as backward begins
  // Async and ssp: the versions pulls answered, named by pushes; sync needs none.
  PulledVersions pulled_;
  PulledVersions* PulledOrNull() { return options_.job.mode == Mode::kSync ? nullptr : &pulled_; }
  std::atomic<int64_t> rewinds_{0};
  std::atomic<bool> shut_down_{false};
  StopFlag stop_heartbeats_;
  std::thread heartbeats_;
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_GRPC_PS_CLIENT_H_
