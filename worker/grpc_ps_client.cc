// PsClient over gRPC: one or more channels per server, every server called
// in parallel with the callback API, retries with backoff on UNAVAILABLE,
// re-registration when a server answers ABORTED (session expired), and a
// heartbeat thread for idle sessions.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/bulk_channel_args.h"
#include "common/grpc_status.h"
#include "common/key_partition.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/delayed_executor.h"
#include "worker/ps_client.h"
#include "worker/transfer_queue.h"

namespace shardps {

absl::Status PsClient::Push(int64_t step, std::vector<TensorIn> tensors) {
  absl::Notification done;
  absl::Status result;
  PushAsync(step, std::move(tensors), [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::Status PsClient::Pull(int64_t step, std::vector<TensorOut> tensors) {
  absl::Notification done;
  absl::Status result;
  PullAsync(step, std::move(tensors), [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

namespace {

// One channel's stubs: the generated one, and the generic one for the raw
// framing of Push and Pull (common/tensor_frame.h).
struct Stub {
  std::unique_ptr<wire::ParameterService::Stub> proto;
  std::unique_ptr<grpc::GenericStub> raw;
  auto* async() { return proto->async(); }
};

// A push in the raw framing: the header, and payloads borrowed from the
// caller's tensors until the call completes.
struct RawPush {
  wire::PushRequest header;
  std::vector<absl::string_view> payloads;
  // bfloat16 payloads, narrowed from the caller's floats.
  std::vector<std::unique_ptr<uint16_t[]>> narrowed;
};

// Collects the answers of several servers; runs `done` once with the first error.
class Fanout {
 public:
  Fanout(int calls, PsClient::Done done) : remaining_(calls), done_(std::move(done)) {}
  void Finish(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && first_error_.ok()) first_error_ = status;
    }
    if (remaining_.fetch_sub(1) == 1) {
      absl::Status result;
      {
        absl::MutexLock lock(&mu_);
        result = first_error_;
      }
      done_(result);
      delete this;
    }
  }

 private:
  std::atomic<int> remaining_;
  PsClient::Done done_;
  absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// The chunk `c` of a tensor whose values start at `tensor_values`.
void FillChunk(wire::Chunk* chunk, const ChunkInfo& c, const float* tensor_values) {
  chunk->mutable_key()->set_tensor(c.key.tensor);
  chunk->mutable_key()->set_chunk(c.key.chunk);
  chunk->set_dtype(wire::DTYPE_FLOAT32);
  chunk->set_data(reinterpret_cast<const char*>(tensor_values + c.offset), c.length * 4);
}

void SetSession(wire::InitRequest& r, uint64_t s) { r.set_session_id(s); }
void SetSession(wire::PullRequest& r, uint64_t s) { r.set_session_id(s); }
void SetSession(wire::RegisterRequest&, uint64_t) {}
void SetSession(RawPush& r, uint64_t s) { r.header.set_session_id(s); }

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(const ClientOptions& options, KeyMap map)
      : options_(options),
        key_map_(std::move(map)),
        push_queue_(options.in_flight_bytes),
        pull_queue_(options.in_flight_bytes) {
    for (size_t s = 0; s < options_.servers.size(); ++s) {
      auto conn = std::make_unique<Server>();
      conn->address = options_.servers[s];
      for (int c = 0; c < std::max(1, options_.channels_per_server); ++c) {
        grpc::ChannelArguments args;
        args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
        args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
        args.SetInt("shardps.channel_index", c);  // distinct args: distinct TCP connections.
        for (const auto& [name, value] : BulkChannelArgs()) args.SetInt(name, value);
        auto channel = grpc::CreateCustomChannel(conn->address, grpc::InsecureChannelCredentials(), args);
        auto stub = std::make_unique<Stub>();
        stub->proto = wire::ParameterService::NewStub(channel);
        stub->raw = std::make_unique<grpc::GenericStub>(channel);
        conn->stubs.push_back(std::move(stub));
      }
      servers_.push_back(std::move(conn));
    }
    heartbeats_ = std::thread([this] { HeartbeatLoop(); });
  }

  ~GrpcPsClient() override {
    stop_.Notify();
    heartbeats_.join();
  }

  absl::StatusOr<int64_t> Register() override;
  absl::Status Init(const std::vector<std::vector<float>>& weights) override;
  void PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) override;
  void PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) override;

 private:
  struct Server {
    std::string address;
    std::vector<std::unique_ptr<Stub>> stubs;
    std::atomic<uint64_t> session{0};
    std::atomic<size_t> next_stub{0};
    std::atomic<int64_t> last_call_ns{0};
    Stub* NextStub() { return stubs[next_stub.fetch_add(1) % stubs.size()].get(); }
  };

  template <typename Req, typename Resp>
  using Issue = std::function<void(Stub*, grpc::ClientContext*, const Req*, Resp*,
                                   std::function<void(grpc::Status)>)>;

  // Sends `req` to server `s`, retrying as the class comment says, then runs
  // `done` with the status (prefixed with the server) and the response.
  template <typename Req, typename Resp>
  void Call(int s, std::shared_ptr<Req> req, absl::Duration timeout, Issue<Req, Resp> issue,
            std::function<void(absl::Status, Resp&)> done, int attempt = 1);

  // Calls fn(chunk, tensor values) for every chunk of `tensors` (TensorIn or
  // TensorOut); INVALID_ARGUMENT naming `what` for a tensor not in the layout.
  template <typename Tensor, typename Fn>
  absl::Status ForEachChunk(const std::vector<Tensor>& tensors, const char* what, Fn fn) const {
    for (const Tensor& t : tensors) {
      if (t.tensor >= key_map_.layout().tensors.size()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " of unknown tensor ", t.tensor));
      }
      for (const ChunkInfo& c : key_map_.ChunksOfTensor(t.tensor)) fn(c, t.values);
    }
    return absl::OkStatus();
  }

  // Requests go in slots: slot = server * lanes + lane, so that one server
  // can get several requests at once (one per channel; see Lanes()).
  int Lanes() const { return std::max(1, options_.channels_per_server); }
  // A transfer's place in its queue: its first tensor (earlier layers first).
  template <typename Tensor>
  static int64_t Priority(const std::vector<Tensor>& tensors) {
    int64_t p = INT64_MAX;
    for (const Tensor& t : tensors) p = std::min<int64_t>(p, t.tensor);
    return p;
  }
  template <typename Tensor>
  int64_t Bytes(const std::vector<Tensor>& tensors) const {
    int64_t bytes = 0;
    for (const Tensor& t : tensors) {
      if (t.tensor < key_map_.layout().tensors.size()) bytes += key_map_.layout().tensors[t.tensor].NumElements() * 4;
    }
    return bytes;
  }
  // The slot of chunk `c`: its server, and a lane that spreads the server's
  // chunks over its channels in turn (`seen` counts chunks per server).
  size_t SlotOf(const ChunkInfo& c, std::vector<int>& seen) const {
    return static_cast<size_t>(c.server) * Lanes() + seen[c.server]++ % Lanes();
  }

  // Sends every non-null reqs[slot] to server slot / lanes, all in parallel.
  // `check` (may be empty) turns an answer into a status; `done` runs once,
  // after all answered, with the first error. INVALID_ARGUMENT naming `what`
  // when there is no request at all.
  template <typename Req, typename Resp>
  void FanOut(const char* what, const std::vector<std::shared_ptr<Req>>& reqs, int lanes, absl::Duration timeout,
              Issue<Req, Resp> issue, std::function<absl::Status(size_t, absl::Status, Resp&)> check, Done done) {
    const int calls = static_cast<int>(std::count_if(reqs.begin(), reqs.end(), [](auto& r) { return r != nullptr; }));
    if (calls == 0) return done(absl::InvalidArgumentError(absl::StrCat(what, " of no tensors")));
    auto* fanout = new Fanout(calls, std::move(done));
    for (size_t slot = 0; slot < reqs.size(); ++slot) {
      if (!reqs[slot]) continue;
      Call<Req, Resp>(static_cast<int>(slot / lanes), reqs[slot], timeout, issue,
                      [slot, fanout, check](absl::Status status, Resp& resp) {
                        fanout->Finish(check ? check(slot, std::move(status), resp) : status);
                      });
    }
  }

  absl::Status RegisterWith(int s, int64_t& current_step);
  void HeartbeatLoop();
  absl::Status Annotate(int s, const absl::Status& status, int attempts) const {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("server ", s, " at ", servers_[s]->address,
                                                    attempts > 1 ? absl::StrCat(" (after ", attempts, " attempts)") : "",
                                                    ": ", status.message()));
  }

  const ClientOptions options_;
  const KeyMap key_map_;
  std::vector<std::unique_ptr<Server>> servers_;
  DelayedExecutor executor_;
  TransferQueue push_queue_, pull_queue_;
  absl::Notification stop_;
  std::thread heartbeats_;
};

template <typename Req, typename Resp>
void GrpcPsClient::Call(int s, std::shared_ptr<Req> req, absl::Duration timeout, Issue<Req, Resp> issue,
                        std::function<void(absl::Status, Resp&)> done, int attempt) {
  struct Attempt {
    grpc::ClientContext ctx;
    Resp resp;
  };
  auto a = std::make_shared<Attempt>();
  a->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  SetSession(*req, servers_[s]->session.load());
  servers_[s]->last_call_ns = absl::GetCurrentTimeNanos();
  issue(servers_[s]->NextStub(), &a->ctx, req.get(), &a->resp,
        [this, s, req, timeout, issue, done, attempt, a](grpc::Status gs) {
          const absl::Status status = FromGrpcStatus(gs);
          const bool retry = attempt < options_.max_attempts &&
                             (absl::IsUnavailable(status) ||
                              (absl::IsAborted(status) && !std::is_same_v<Req, wire::RegisterRequest>));
          if (!retry) return done(Annotate(s, status, attempt), a->resp);
          const absl::Duration backoff =
              std::min(options_.initial_backoff * (1 << std::min(attempt - 1, 10)), absl::Seconds(2));
          executor_.RunAfter(absl::IsAborted(status) ? absl::ZeroDuration() : backoff,
                             [this, s, req, timeout, issue, done, attempt, status] {
                               if (absl::IsAborted(status)) {
                                 spdlog::warn("server {}: {}; registering again", s, std::string(status.message()));
                                 int64_t step = 0;
                                 if (absl::Status r = RegisterWith(s, step); !r.ok()) {
                                   Resp empty;
                                   return done(r, empty);
                                 }
                               }
                               Call<Req, Resp>(s, req, timeout, issue, done, attempt + 1);
                             });
        });
}

absl::Status GrpcPsClient::RegisterWith(int s, int64_t& current_step) {
  auto req = std::make_shared<wire::RegisterRequest>();
  req->set_rank(options_.rank);
  *req->mutable_view() = JobViewToProto(options_.job);
  absl::Notification finished;
  absl::Status result;
  Call<wire::RegisterRequest, wire::RegisterResponse>(
      s, req, options_.push_timeout,
      [](Stub* stub, grpc::ClientContext* ctx, const wire::RegisterRequest* rq, wire::RegisterResponse* rs,
         std::function<void(grpc::Status)> cb) { stub->async()->Register(ctx, rq, rs, std::move(cb)); },
      [&](absl::Status status, wire::RegisterResponse& resp) {
        if (status.ok()) {
          servers_[s]->session = resp.session_id();
          current_step = resp.current_step();
        }
        result = status;
        finished.Notify();
      });
  finished.WaitForNotification();
  return result;
}

absl::StatusOr<int64_t> GrpcPsClient::Register() {
  std::vector<int64_t> steps(servers_.size(), 0);
  std::vector<absl::Status> results(servers_.size());
  std::vector<std::thread> threads;
  for (size_t s = 0; s < servers_.size(); ++s) {
    threads.emplace_back([&, s] { results[s] = RegisterWith(static_cast<int>(s), steps[s]); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& r : results) {
    if (!r.ok()) return r;
  }
  return *std::max_element(steps.begin(), steps.end());
}

absl::Status GrpcPsClient::Init(const std::vector<std::vector<float>>& weights) {
  const Layout& layout = key_map_.layout();
  if (weights.size() != layout.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Init got ", weights.size(), " tensors; layout has ",
                                                   layout.tensors.size()));
  }
  std::vector<std::shared_ptr<wire::InitRequest>> reqs(servers_.size());
  for (auto& r : reqs) {
    r = std::make_shared<wire::InitRequest>();
    *r->mutable_layout() = LayoutToProto(layout);
  }
  for (const ChunkInfo& c : key_map_.chunks()) {
    if (static_cast<int64_t>(weights[c.key.tensor].size()) != layout.tensors[c.key.tensor].NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat("Init tensor ", c.key.tensor, " has the wrong size"));
    }
    FillChunk(reqs[c.server]->add_chunks(), c, weights[c.key.tensor].data());
  }
  absl::Notification finished;
  absl::Status result;
  FanOut<wire::InitRequest, wire::InitResponse>(
      "init", reqs, 1, options_.push_timeout,
      [](Stub* stub, grpc::ClientContext* ctx, const wire::InitRequest* rq, wire::InitResponse* rs,
         std::function<void(grpc::Status)> cb) { stub->async()->Init(ctx, rq, rs, std::move(cb)); },
      nullptr, [&](absl::Status s) {
        result = s;
        finished.Notify();
      });
  finished.WaitForNotification();
  return result;
}

void GrpcPsClient::PushAsync(int64_t step, std::vector<TensorIn> tensors, Done done) {
  std::vector<std::shared_ptr<RawPush>> reqs(servers_.size() * Lanes());
  std::vector<int> seen(servers_.size());
  absl::Status grouped = ForEachChunk(tensors, "push", [&](const ChunkInfo& c, const float* values) {
    auto& req = reqs[SlotOf(c, seen)];
    if (!req) {
      req = std::make_shared<RawPush>();
      req->header.set_step(step);
    }
    wire::Chunk* chunk = req->header.add_chunks();
    chunk->mutable_key()->set_tensor(c.key.tensor);
    chunk->mutable_key()->set_chunk(c.key.chunk);
    chunk->set_dtype(options_.wire_dtype);
    if (options_.wire_dtype == wire::DTYPE_BFLOAT16) {
      auto& narrow = req->narrowed.emplace_back(new uint16_t[c.length]);
      ToBfloat16(values + c.offset, c.length, narrow.get());
      req->payloads.emplace_back(reinterpret_cast<const char*>(narrow.get()), c.length * 2);
    } else {
      req->payloads.emplace_back(reinterpret_cast<const char*>(values + c.offset), c.length * 4);
    }
    chunk->set_raw_bytes(static_cast<int64_t>(req->payloads.back().size()));
  });
  if (!grouped.ok()) return done(grouped);
  push_queue_.Submit(Priority(tensors), Bytes(tensors), [this, reqs, done](std::function<void()> finished) {
  FanOut<RawPush, grpc::ByteBuffer>(
      "push", reqs, Lanes(), options_.push_timeout,
      [](Stub* stub, grpc::ClientContext* ctx, const RawPush* rq, grpc::ByteBuffer* rs,
         std::function<void(grpc::Status)> cb) {
        auto frame = std::make_shared<grpc::ByteBuffer>(EncodeFrame(rq->header, rq->payloads));
        stub->raw->UnaryCall(ctx, kRawPushMethod, grpc::StubOptions(), frame.get(), rs,
                             [frame, cb = std::move(cb)](grpc::Status s) { cb(std::move(s)); });
      },
      nullptr, [finished, done](absl::Status s) {
        finished();
        done(std::move(s));
      });
  });
}

void GrpcPsClient::PullAsync(int64_t step, std::vector<TensorOut> tensors, Done done) {
  struct Target {
    ChunkInfo chunk;
    float* values;
  };
  std::vector<std::shared_ptr<wire::PullRequest>> reqs(servers_.size() * Lanes());
  auto targets = std::make_shared<std::vector<std::vector<Target>>>(reqs.size());
  std::vector<int> seen(servers_.size());
  absl::Status grouped = ForEachChunk(tensors, "pull", [&](const ChunkInfo& c, float* values) {
    const size_t slot = SlotOf(c, seen);
    auto& req = reqs[slot];
    if (!req) {
      req = std::make_shared<wire::PullRequest>();
      req->set_step(step);
      req->set_dtype(options_.wire_dtype);
    }
    wire::Key* key = req->add_keys();
    key->set_tensor(c.key.tensor);
    key->set_chunk(c.key.chunk);
    (*targets)[slot].push_back({c, values});
  });
  if (!grouped.ok()) return done(grouped);
  pull_queue_.Submit(Priority(tensors), Bytes(tensors), [this, reqs, targets, done](std::function<void()> finished) {
  FanOut<wire::PullRequest, grpc::ByteBuffer>(
      "pull", reqs, Lanes(), options_.pull_timeout,
      [](Stub* stub, grpc::ClientContext* ctx, const wire::PullRequest* rq, grpc::ByteBuffer* rs,
         std::function<void(grpc::Status)> cb) {
        auto request = std::make_shared<grpc::ByteBuffer>(MessageBuffer(*rq));
        stub->raw->UnaryCall(ctx, kRawPullMethod, grpc::StubOptions(), request.get(), rs,
                             [request, cb = std::move(cb)](grpc::Status s) { cb(std::move(s)); });
      },
      [this, targets, lanes = Lanes(), dtype = options_.wire_dtype](size_t slot, absl::Status status,
                                                                    grpc::ByteBuffer& answer) {
        if (!status.ok()) return status;
        const int s = static_cast<int>(slot / lanes);
        const std::vector<Target>& want = (*targets)[slot];
        wire::PullResponse resp;
        absl::StatusOr<std::unique_ptr<FrameReader>> frame = FrameReader::Parse(answer, &resp);
        if (!frame.ok()) return Annotate(s, absl::DataLossError(frame.status().message()), 1);
        if (resp.chunks_size() != static_cast<int>(want.size())) {
          return Annotate(s, absl::DataLossError(absl::StrCat("pull answered ", resp.chunks_size(),
                                                              " chunks; asked for ", want.size())), 1);
        }
        for (size_t i = 0; i < want.size(); ++i) {
          const wire::Chunk& c = resp.chunks(static_cast<int>(i));
          const int64_t bytes = want[i].chunk.length * ValueBytes(dtype);
          if (c.key().tensor() != want[i].chunk.key.tensor || c.key().chunk() != want[i].chunk.key.chunk ||
              c.dtype() != dtype || c.raw_bytes() != bytes || (*frame)->remaining() < bytes) {
            return Annotate(s, absl::DataLossError(absl::StrCat("pull answered a wrong chunk for key ",
                                                                KeyName(want[i].chunk.key))), 1);
          }
          float* out = want[i].values + want[i].chunk.offset;
          if (dtype == wire::DTYPE_FLOAT32) {
            (*frame)->CopyNext(bytes, reinterpret_cast<char*>(out));
          } else {
            (*frame)->WidenNextBfloat16(want[i].chunk.length, out);
          }
        }
        return status;
      },
      [finished, done](absl::Status s) {
        finished();
        done(std::move(s));
      });
  });
}

void GrpcPsClient::HeartbeatLoop() {
  const absl::Duration interval = options_.heartbeat_interval;
  while (!stop_.WaitForNotificationWithTimeout(interval / 2)) {
    for (size_t s = 0; s < servers_.size(); ++s) {
      Server& server = *servers_[s];
      const int64_t idle_ns = absl::GetCurrentTimeNanos() - server.last_call_ns;
      if (server.session == 0 || idle_ns < absl::ToInt64Nanoseconds(interval)) continue;
      auto req = std::make_shared<wire::HeartbeatRequest>();
      auto resp = std::make_shared<wire::HeartbeatResponse>();
      auto ctx = std::make_shared<grpc::ClientContext>();
      ctx->set_deadline(absl::ToChronoTime(absl::Now() + interval));
      req->set_session_id(server.session);
      server.last_call_ns = absl::GetCurrentTimeNanos();
      server.NextStub()->async()->Heartbeat(ctx.get(), req.get(), resp.get(),
                                            [req, resp, ctx, s](grpc::Status st) {
                                              if (!st.ok()) spdlog::debug("heartbeat to server {}: {}", s, st.error_message());
                                            });
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const ClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no servers given");
  if (static_cast<int>(options.servers.size()) != options.job.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(options.servers.size(), " server addresses given; the job has ",
                                                   options.job.num_servers, " servers"));
  }
  if (options.rank < 0 || options.rank >= options.job.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is not in [0, ", options.job.num_workers, ")"));
  }
  absl::StatusOr<KeyMap> map = KeyMap::Build(options.layout, options.job.num_servers, options.job.partition_bytes);
  if (!map.ok()) return map.status();
  ClientOptions o = options;
  o.job.layout_hash = LayoutHash(options.layout);
  return std::unique_ptr<PsClient>(new GrpcPsClient(o, *std::move(map)));
}

}  // namespace shardps
