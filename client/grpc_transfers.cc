// GrpcPsClient's pushes and pulls (client/grpc_ps_client.h): the transfer
// schedule.
//
// Every push and pull is cut into keys of at most one partition, and each
// server's keys into requests (client/ps_requests.h): pushes of up to
// push_request_bytes, fetches of up to fetch_request_bytes (a partition's by
// default). Requests wait in two queues, pushes
// (outgoing bytes) and fetched weights (incoming bytes), each ordered by
// (step, the request's first tensor): the tensors the next forward pass
// needs first go first, in both directions (P3, ByteScheduler). Each queue
// keeps a window of bytes in flight (client/transfer_queue.h) that ends only
// when the answer arrives, so the window holds end to end: however full the
// links and their buffers are, a request in front of the queue waits behind
// at most one window of bytes. With the first-weights lane the fetches have
// no window: the servers send the lane's answers first (FetchBudget).
//
// Where pulls wait for weights (sync: for the step's version; ssp: for the
// slowest worker), a pull first awaits them with an await-only request (a
// small answer, sent when ready), and only then queues the fetch of the
// values: weights are taken when they are ready and needed soonest, never
// while a not-yet-ready pull holds the window.
#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"
#include "client/grpc_ps_client.h"
#include "common/tensor_frame.h"
#include "common/trace.h"
#include "common/wire_dtype.h"

namespace shardps {

namespace {

template <typename Tensor>
uint32_t FirstTensor(const std::vector<Tensor>& tensors) {
  uint32_t first = UINT32_MAX;
  for (const Tensor& t : tensors) first = std::min(first, t.tensor);
  return first;
}

// An attempt of a raw Pull call: `req` under the attempt's session, its
// answer into `resp` (an await and a fetch send the same kind of request).
ServerConnection::Attempt RawPullAttempt(std::shared_ptr<wire::PullRequest> req,
                                         std::shared_ptr<grpc::ByteBuffer> resp) {
  return [req = std::move(req), resp = std::move(resp)](Stub& stub, grpc::ClientContext* ctx, uint64_t session,
                                                        std::function<void(grpc::Status)> cb) {
    // after_own_push holds within the session its push was sent in (StartPull
    // records it). Under a new one the server may be a new incarnation that
    // never saw a push the old one acknowledged, and would wait forever.
    if (req->session_id() != session) req->set_after_own_push(false);
    req->set_session_id(session);
    auto request = std::make_shared<grpc::ByteBuffer>(MessageBuffer(*req));
    stub.raw->UnaryCall(ctx, kRawPullMethod, grpc::StubOptions(), request.get(), resp.get(),
                        [request, cb = std::move(cb)](grpc::Status s) { cb(std::move(s)); });
  };
}

// One push attempt: the frame over the caller's payloads (no copy).
ServerConnection::Attempt RawPushAttempt(std::shared_ptr<RawPush> req, std::shared_ptr<grpc::ByteBuffer> resp) {
  return [req = std::move(req), resp = std::move(resp)](Stub& stub, grpc::ClientContext* ctx, uint64_t session,
                                                        std::function<void(grpc::Status)> cb) {
    req->header.set_session_id(session);
    auto frame = std::make_shared<grpc::ByteBuffer>(EncodeFrame(req->header, req->payloads));
    stub.raw->UnaryCall(ctx, kRawPushMethod, grpc::StubOptions(), frame.get(), resp.get(),
                        [frame, cb = std::move(cb)](grpc::Status s) { cb(std::move(s)); });
  };
}

}  // namespace

// Pushes: 512 KB in flight at least (about 4 ms of a 1 Gbit/s link) keeps the
// uplink busy between acknowledgements. Fetched weights: 256 KB, so that
// the weights the next forward needs first wait behind less of this
// worker's own earlier fetches in the servers' sockets and the switch's
// FIFO port into this host, which it shares with the pushes into its
// colocated server. Measured on the emulated cluster (README, "Scaling"):
// 256 KB for both, 1 MB for both, and more in flight behind a reservation
// were slower; 256 KB of fetches beside 512 KB of pushes was faster.
// Either window holds two requests at least (PushRequestBytes,
// FetchRequestBytes), so that a server applies or reads one while the next
// is on the wire: with 2 MB partitions on loopback a 16 MB push + pull went
// from 0.93x ps-lite's speed to 1.45x in one run
// (bench/results/push_pull_vs_pslite.txt). With 1 MB push requests (the
// default) that is 2 MB of pushes: a worker still pushes to several servers
// at once, where 256 KB requests in a 512 KB window cost sync N = 8
// efficiency (bench/results/request_bytes.txt).
namespace {
// What was asked, held to half the message limit (room for the header) and,
// with a window set by hand, to half of it (two requests in flight); and a
// partition's values at least, in the wire's encoding.
int64_t RequestCap(int64_t asked, const ClientOptions& options) {
  int64_t cap = std::min(asked, options.max_message_bytes / 2);
  if (options.in_flight_bytes > 0) cap = std::min(cap, options.in_flight_bytes / 2);
  return std::max(cap, options.job.partition_bytes / 4 * ValueBytes(options.wire_dtype));
}
}  // namespace

int64_t PushRequestBytes(const ClientOptions& options) { return RequestCap(options.push_request_bytes, options); }

int64_t FetchRequestBytes(const ClientOptions& options) { return RequestCap(options.fetch_request_bytes, options); }

namespace {
int64_t AutomaticWindow(int64_t request_bytes, int64_t floor) {
  return std::max<int64_t>(floor, 2 * request_bytes);
}

// The lane a pull takes: the first-weights lane when it says it is a
// first-weights call, which the server reads to lift the connection.
Lane PullLane(const wire::PullRequest& request, Lane otherwise) {
  return request.first_weights() ? Lane::kFirstWeights : otherwise;
}
}  // namespace

TransferQueue::Budget PushBudget(const ClientOptions& options) {
  TransferQueue::Budget b;
  b.total = options.in_flight_bytes != 0 ? options.in_flight_bytes
                                          : AutomaticWindow(PushRequestBytes(options), 512 << 10);
  b.behind_reservation = b.total;  // pushes never reserve
  return b;
}

TransferQueue::Budget FetchBudget(const ClientOptions& options) {
  TransferQueue::Budget b;
  if (options.in_flight_bytes == 0 && options.UsesFirstWeightsLane()) {
    // No window: the first weights overtake the others on the servers'
    // uplinks, where the lane is lifted, not in this queue (N = 16 x40,
    // servers apart: 0.928, 0.929 against 0.922, 0.920 with no lane; the lane
    // with the default window did not gain; docs/performance.md).
    b.total = -1;
    return b;
  }
  b.total = options.in_flight_bytes != 0 ? options.in_flight_bytes
                                          : AutomaticWindow(FetchRequestBytes(options), 256 << 10);
  // While the weights the next forward needs first are awaited, 128 KB of
  // later ones may be fetched: enough to use a link's spare time during
  // backward, little enough not to delay what is awaited.
  b.behind_reservation = 128 << 10;
  return b;
}

uint32_t FirstWeightsTensors(const Layout& layout) {
  int64_t total = 0;
  for (const TensorSpec& t : layout.tensors) total += t.NumElements();
  uint32_t n = 0;
  for (int64_t begins = 0; n < layout.tensors.size() && (n == 0 || begins * 25 < total); ++n) {
    begins += layout.tensors[n].NumElements();
  }
  return n;
}

void GrpcPsClient::PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) {
  absl::StatusOr<std::vector<std::shared_ptr<RawPush>>> reqs = builder_.Pushes(step, tensors, PulledOrNull());
  if (!reqs.ok()) return done(reqs.status());
  auto fanout = std::make_shared<Fanout>(static_cast<int>(reqs->size()), std::move(done));
  const absl::Time queued = absl::Now();
  const uint32_t first = FirstTensor(tensors);
  const int64_t servers = static_cast<int64_t>(connections_.size());
  for (std::shared_ptr<RawPush>& req : *reqs) {
    const int64_t bytes = req->bytes;
    const int server = req->server;
    uint64_t id;
    {
      absl::MutexLock lock(&waiting_mu_);
      id = next_push_id_++;
      waiting_pushes_.emplace(id, WaitingPush{std::move(req), fanout, queued});
    }
    // A step's pushes to one server form a group: those waiting together go as one.
    push_queue_.SubmitToGroup(PriorityOf(step, first, server), bytes, step * servers + server, id);
  }
}

void GrpcPsClient::SendWaitingPushes(std::vector<uint64_t> ids, std::function<void()> finished) {
  std::vector<std::shared_ptr<RawPush>> pushes;
  std::vector<std::shared_ptr<Fanout>> callers;
  absl::Time queued = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&waiting_mu_);
    for (uint64_t id : ids) {
      auto waiting = waiting_pushes_.extract(id);
      pushes.push_back(std::move(waiting.mapped().request));
      callers.push_back(std::move(waiting.mapped().fanout));
      queued = std::min(queued, waiting.mapped().queued);
    }
  }
  std::vector<size_t> request_of;
  std::vector<std::shared_ptr<RawPush>> requests = MergePushes(std::move(pushes), &request_of);
  // Each caller learns the status of the request that carried its push.
  std::vector<std::vector<std::shared_ptr<Fanout>>> callers_of(requests.size());
  for (size_t i = 0; i < callers.size(); ++i) callers_of[request_of[i]].push_back(std::move(callers[i]));
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(requests.size()));
  std::function<void()> all_finished = [left, finished = std::move(finished)] {
    if (left->fetch_sub(1) == 1) finished();
  };
  for (size_t r = 0; r < requests.size(); ++r) {
    auto answered = std::make_shared<Fanout>(1, [mine = std::move(callers_of[r])](const absl::Status& s) {
      for (const std::shared_ptr<Fanout>& caller : mine) caller->Finish(s);
    });
    SendPush(std::move(requests[r]), queued, all_finished, std::move(answered));
  }
}

void GrpcPsClient::SendPush(std::shared_ptr<RawPush> req, absl::Time queued, std::function<void()> finished,
                            std::shared_ptr<Fanout> fanout) {
  const absl::Time sent = absl::Now();
  auto resp = std::make_shared<grpc::ByteBuffer>();
  CallSpec spec = TransferSpec("push", options_.push_timeout, Lane::kPushes);
  // The server whose stub the last attempt took: the one that acknowledged it.
  auto answered_by = std::make_shared<std::atomic<int>>(req->server);
  ServerConnection::Attempt attempt = [inner = RawPushAttempt(req, resp), answered_by](
                                          Stub& stub, grpc::ClientContext* ctx, uint64_t session,
                                          std::function<void(grpc::Status)> done) {
    answered_by->store(stub.server_id);
    inner(stub, ctx, session, std::move(done));
  };
  connections_[req->server]->Call(
      spec, std::move(attempt),
      [this, req, resp, spec, queued, sent, answered_by, finished = std::move(finished), fanout = std::move(fanout),
       timeline = failover_ != nullptr ? failover_->timeline() : 0](absl::Status st) {
        finished();  // first: the window's next request need not wait for the copy below
        // With replication: kept, as a copy (the caller may reuse its tensors
        // once this push is done), for the backup until a later step's push is
        // acknowledged.
        if (st.ok() && failover_ != nullptr) {
          failover_->Retain(req->server, answered_by->load(), req->header.step(), spec,
                            RawPushAttempt(req->OwnedCopy(), std::make_shared<grpc::ByteBuffer>()), timeline);
        }
        TraceTransfer("push", req->server, req->first_tensor, req->header.step(), req->bytes, queued, sent);
        fanout->Finish(st);
      });
}

absl::StatusOr<std::vector<PullPart>> GrpcPsClient::PullParts(int64_t step,
                                                             const std::vector<TensorOut>& tensors) const {
  absl::StatusOr<std::vector<PullPart>> parts = builder_.Pulls(step, tensors);
  if (!parts.ok()) return parts;
  const uint32_t first = FirstTensor(tensors);
  for (PullPart& part : *parts) {
    // The part's own first tensor (one call may pull a whole model) says
    // whether it takes the first-weights lane.
    if (part.first_tensor < first_weights_tensors_) part.request->set_first_weights(true);
    part.first_tensor = first;  // the whole transfer's place in line
  }
  return parts;
}

void GrpcPsClient::PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) {
  StartPull(step, std::move(tensors), /*after_own_push=*/false, std::move(done));
}

void GrpcPsClient::StartPull(int64_t step, std::vector<TensorOut> tensors, bool after_own_push, Done done) {
  absl::StatusOr<std::vector<PullPart>> parts = PullParts(step, tensors);
  if (!parts.ok()) return done(parts.status());
  auto fanout = std::make_shared<Fanout>(static_cast<int>(parts->size()), std::move(done));
  for (PullPart& part : *parts) {
    if (after_own_push) {
      part.request->set_after_own_push(true);
      part.request->set_session_id(connections_[part.server]->session());  // as its push goes out
    }
    AwaitThenFetch(step, std::make_shared<PullPart>(std::move(part)), fanout);
  }
}

void GrpcPsClient::PushThenPull(int64_t step, std::vector<TensorIn> grads, std::vector<TensorOut> weights,
                                Done pushed, Done pulled) {
  if (options_.job.mode == Mode::kSync) {
    PushAsync(step, std::move(grads), std::move(pushed));
    return PullAsync(step + 1, std::move(weights), std::move(pulled));
  }
  if (options_.async_prefetch) {  // async and ssp (sync returned above)
    prefetch_.Begin(step + 1);  // before the push: every tensor's fetch in line first
    PushAsync(step, std::move(grads), std::move(pushed));
    return prefetch_.Deliver(step + 1, std::move(weights), std::move(pulled));
  }
  if (!options_.pull_with_push) {
    return PushThenFetch(step, std::move(grads), std::move(weights), std::move(pushed), std::move(pulled));
  }
  // Read-your-writes without a round trip: the pull leaves with the push,
  // not after its acknowledgement, and the server holds it until the push
  // is applied (PullRequest.after_own_push), or fails it when the push is
  // refused.
  PushAsync(step, std::move(grads), std::move(pushed));
  StartPull(step + 1, std::move(weights), /*after_own_push=*/true, std::move(pulled));
}

void GrpcPsClient::PushThenFetch(int64_t step, std::vector<TensorIn> grads, std::vector<TensorOut> weights,
                                 Done pushed, Done pulled) {
  absl::StatusOr<std::vector<PullPart>> parts = PullParts(step + 1, weights);
  if (!parts.ok()) {
    PushAsync(step, std::move(grads), std::move(pushed));
    return pulled(parts.status());
  }
  // The pull holds its places from now on; its values are fetched once the
  // push is acknowledged, so they are as fresh as the step allows.
  auto reserved = std::make_shared<std::vector<std::pair<TransferQueue::Ticket, std::shared_ptr<PullPart>>>>();
  for (PullPart& part : *parts) {
    const TransferQueue::Ticket ticket = pull_queue_.Reserve(PriorityOf(step + 1, part.first_tensor, part.server));
    reserved->emplace_back(ticket, std::make_shared<PullPart>(std::move(part)));
  }
  PushAsync(step, std::move(grads),
            [this, step, reserved, pushed = std::move(pushed), pulled = std::move(pulled)](absl::Status s) {
              if (!s.ok()) {
                for (auto& [ticket, part] : *reserved) pull_queue_.Cancel(ticket);
                pulled(s);
              } else {
                auto fanout = std::make_shared<Fanout>(static_cast<int>(reserved->size()), pulled);
                for (auto& [ticket, part] : *reserved) AwaitThenFetch(step + 1, part, fanout, ticket);
              }
              pushed(std::move(s));
            });
}

void GrpcPsClient::AwaitThenFetch(int64_t step, std::shared_ptr<PullPart> part, std::shared_ptr<Fanout> fanout,
                                  std::optional<TransferQueue::Ticket> reserved) {
  const TransferPriority priority = PriorityOf(step, part->first_tensor, part->server);
  if (options_.job.mode == Mode::kAsync) {
    const int64_t bytes = part->bytes;  // read before FetchStart takes `part`
    if (reserved) return pull_queue_.Submit(*reserved, bytes, FetchStart(std::move(part), std::move(fanout)));
    return pull_queue_.Submit(priority, bytes, FetchStart(std::move(part), std::move(fanout)));
  }
  // The fetch's place in line is held from now on, so that it goes before
  // every later one whatever order the weights become ready in.
  const TransferQueue::Ticket ticket = reserved ? *reserved : pull_queue_.Reserve(priority);
  auto await = std::make_shared<wire::PullRequest>(*part->request);
  await->set_await_only(true);
  // With the lane, every await takes it: small, and awaited.
  if (options_.UsesFirstWeightsLane()) await->set_first_weights(true);
  const Lane lane = PullLane(*await, Lane::kOthers);  // before `await` is moved into the call
  auto resp = std::make_shared<grpc::ByteBuffer>();
  const absl::Time sent = absl::Now();
  connections_[part->server]->Call(
      TransferSpec("pull", options_.pull_timeout, lane), RawPullAttempt(std::move(await), resp),
      [this, step, part, sent, fanout, ticket](absl::Status st) mutable {
        if (!st.ok()) {
          pull_queue_.Cancel(ticket);
          return fanout->Finish(st);
        }
        TraceTransfer("await", part->server, part->first_tensor, step, 0, sent, sent);
        const int64_t bytes = part->bytes;  // read before FetchStart takes `part`
        pull_queue_.Submit(ticket, bytes, FetchStart(std::move(part), std::move(fanout)));
      });
}

TransferQueue::Start GrpcPsClient::FetchStart(std::shared_ptr<PullPart> part, std::shared_ptr<Fanout> fanout) {
  const absl::Time queued = absl::Now();
  return [this, part = std::move(part), queued, fanout = std::move(fanout)](std::function<void()> finished) mutable {
    SendFetch(std::move(part), queued, std::move(finished), std::move(fanout));
  };
}

void GrpcPsClient::SendFetch(std::shared_ptr<PullPart> part, absl::Time queued, std::function<void()> finished,
                             std::shared_ptr<Fanout> fanout) {
  const absl::Time sent = absl::Now();
  auto resp = std::make_shared<grpc::ByteBuffer>();
  ServerConnection* connection = connections_[part->server].get();
  connection->Call(
      TransferSpec("pull", options_.pull_timeout, PullLane(*part->request, Lane::kFetches)),
      RawPullAttempt(part->request, resp),
      [this, connection, part, resp, queued, sent, finished = std::move(finished),
       fanout = std::move(fanout)](absl::Status st) {
        if (st.ok()) {
          st = connection->Annotate(
              DecodePullAnswer(*resp, part->targets, options_.wire_dtype, part->request->step(), PulledOrNull()));
        }
        finished();
        TraceTransfer("pull", part->server, part->first_tensor, part->request->step(), part->bytes, queued, sent);
        fanout->Finish(st);
      });
}

void GrpcPsClient::TraceTransfer(const char* what, int server, uint32_t first_tensor, int64_t step, int64_t bytes,
                                 absl::Time queued, absl::Time sent) const {
  if (options_.trace == nullptr) return;
  const absl::Time done = absl::Now();
  const std::string name = absl::StrCat(what, " ", options_.layout.tensors[first_tensor].name, " to server ", server);
  if (sent - queued > absl::Microseconds(100)) {
    options_.trace->Async(absl::StrCat(what, " queue"), name, queued, sent, {{"step", step}});
  }
  options_.trace->Async(what, name, sent, done, {{"step", step}, {"bytes", bytes}});
}

}  // namespace shardps
