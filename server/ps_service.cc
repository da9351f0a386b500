#include "server/ps_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.pb.h"
#include "server/rows_service.h"
#include "server/unary_reactor.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

std::vector<ChunkPayload> PayloadsOf(const google::protobuf::RepeatedPtrField<wire::Chunk>& chunks) {
  std::vector<ChunkPayload> out;
  out.reserve(chunks.size());
  for (const wire::Chunk& c : chunks) {
    out.push_back(ChunkPayload{{c.key().tensor(), c.key().chunk()}, c.dtype(), {c.data()}, BaseVersionOf(c)});
  }
  return out;
}

// Parses the request as Req, or refuses it INVALID_ARGUMENT naming Req.
template <typename Req>
class ProtoReactor : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 protected:
  virtual void Serve(const Req& req) = 0;

 private:
  void Handle() final {
    Req req;
    if (!grpc::SerializationTraits<Req>::Deserialize(&request_, &req).ok()) {
      return Refuse(absl::InvalidArgumentError(
          absl::StrCat("request does not parse as ", Req::descriptor()->full_name())));
    }
    Serve(req);
  }
};

// A method answered at once: Handler(core, request) -> StatusOr<Resp>.
template <typename Req, typename Resp>
class ImmediateReactor final : public ProtoReactor<Req> {
 public:
  using Handler = absl::StatusOr<Resp> (*)(ParameterServer*, const Req&);
  ImmediateReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core, Handler handler)
      : ProtoReactor<Req>(ctx, core), handler_(handler) {}

 private:
  void Serve(const Req& req) override {
    absl::StatusOr<Resp> resp = handler_(this->core_, req);
    if (!resp.ok()) return this->Reply(resp.status());
    this->Reply(absl::OkStatus(), MessageBuffer(*resp));
  }
  const Handler handler_;
};

absl::StatusOr<wire::RegisterResponse> Register(ParameterServer* core, const wire::RegisterRequest& req) {
  absl::StatusOr<JobView> view = JobViewFromProto(req.view());
  if (!view.ok()) return core->RecordRefused(view.status());
  core->NotePeers(std::vector<std::string>(req.servers().begin(), req.servers().end()));
  std::optional<ParameterServer::Resume> resume;
  if (req.has_resume_step()) resume = ParameterServer::Resume{req.resume_step(), req.timeline()};
  absl::StatusOr<Registration> reg = core->Register(req.rank(), *view, resume);
  if (!reg.ok()) return reg.status();
  wire::RegisterResponse resp;
  resp.set_session_id(reg->session_id);
  resp.set_current_step(reg->current_step);
  resp.set_server_id(core->server_id());
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(reg->heartbeat_interval));
  resp.set_incarnation(reg->incarnation);
  resp.set_timeline(reg->timeline);
  resp.set_awaiting_rewind(reg->awaiting_rewind);
  resp.set_initialized(reg->initialized);
  resp.set_trained(reg->trained);
  for (int64_t s : reg->checkpoint_steps) resp.add_checkpoint_steps(s);
  return resp;
}

// Float32 values from raw little-endian bytes; INVALID_ARGUMENT when the
// size is not a multiple of 4.
absl::StatusOr<std::vector<float>> FloatsOf(const std::string& bytes, absl::string_view what) {
  if (bytes.size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", bytes.size(), " bytes, not a multiple of 4"));
  }
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

absl::StatusOr<wire::ReplicateResponse> Replicate(ParameterServer* core, const wire::ReplicateRequest& req) {
  if (req.rows_size() > 0) {
    return core->RecordRefused(absl::InvalidArgumentError("rows of sparse tables replicate in the raw framing only"));
  }
  std::vector<ReplicaUpdate> updates;
  updates.reserve(req.keys_size());
  for (const wire::ReplicaKey& k : req.keys()) {
    ReplicaUpdate u{{k.key().tensor(), k.key().chunk()}, k.version(), nullptr, {}};
    absl::StatusOr<std::vector<float>> weights = FloatsOf(k.weights(), "a replica's weights");
    if (!weights.ok()) return core->RecordRefused(weights.status());
    u.weights = std::make_shared<const std::vector<float>>(*std::move(weights));
    for (const std::string& slot : k.slots()) {
      absl::StatusOr<std::vector<float>> values = FloatsOf(slot, "a replica's optimizer slot");
      if (!values.ok()) return core->RecordRefused(values.status());
      u.slots.push_back(*std::move(values));
    }
    u.last_pushed_step.assign(k.last_pushed_step().begin(), k.last_pushed_step().end());
    updates.push_back(std::move(u));
  }
  if (absl::Status applied = core->ApplyReplica(req.from_server(), req.timeline(), updates); !applied.ok()) return applied;
  return wire::ReplicateResponse();
}

absl::StatusOr<wire::InitResponse> Init(ParameterServer* core, const wire::InitRequest& req) {
  absl::StatusOr<Layout> layout = LayoutFromProto(req.layout());
  if (!layout.ok()) return core->RecordRefused(layout.status());
  absl::StatusOr<wire::InitOutcome> outcome = core->Init(req.session_id(), *layout, PayloadsOf(req.chunks()));
  if (!outcome.ok()) return outcome.status();
  wire::InitResponse resp;
  resp.set_outcome(*outcome);
  return resp;
}

// Push in plain protobuf, answered when the core acknowledges it (at once
// but with --replicas > 1: ParameterServer::Push).
class PushReactor final : public ProtoReactor<wire::PushRequest> {
 public:
  using ProtoReactor::ProtoReactor;

 private:
  void Serve(const wire::PushRequest& req) override {
    core_->Push(req.session_id(), req.step(), PayloadsOf(req.chunks()), Deadline(),
                [this](absl::StatusOr<std::vector<wire::PushOutcome>> outcomes) { ReplyPush(std::move(outcomes)); });
  }
};

absl::StatusOr<wire::HeartbeatResponse> Heartbeat(ParameterServer* core, const wire::HeartbeatRequest& req) {
  absl::StatusOr<int64_t> step = core->Heartbeat(req.session_id());
  if (!step.ok()) return step.status();
  wire::HeartbeatResponse resp;
  resp.set_current_step(*step);
  return resp;
}

absl::StatusOr<wire::JoinResponse> Join(ParameterServer* core, const wire::JoinRequest& req) {
  const JoinInfo info = core->AnswerJoin(req.server_id());
  wire::JoinResponse resp;
  resp.set_initialized(info.initialized);
  if (info.initialized) *resp.mutable_layout() = LayoutToProto(info.layout);
  resp.set_timeline(info.timeline);
  return resp;
}

absl::StatusOr<wire::RewindResponse> Rewind(ParameterServer* core, const wire::RewindRequest& req) {
  std::vector<RestartedServer> restarted;
  for (const wire::RestartedServer& r : req.restarted()) restarted.push_back({r.server_id(), r.incarnation()});
  if (req.step() < 0 || restarted.empty()) {
    return core->RecordRefused(absl::InvalidArgumentError(
        absl::StrCat("rewind to step ", req.step(), " naming ", restarted.size(),
                     " restarted servers; want a step >= 0 and at least one server")));
  }
  absl::StatusOr<RewindResult> result = core->Rewind(req.step(), req.timeline(), restarted);
  if (!result.ok()) return result.status();
  wire::RewindResponse resp;
  resp.set_rewound(result->rewound);
  resp.set_timeline(result->timeline);
  resp.set_steps_lost(result->steps_lost);
  return resp;
}

void FillStatus(ParameterServer* core, wire::ServerStatus* st) {
  const ServerStats s = core->Stats();
  st->set_server_id(core->server_id());
  st->set_mode(ModeToProto(core->mode()));
  st->set_initialized(s.initialized);
  st->set_num_keys(s.num_keys);
  st->set_owned_bytes(s.owned_bytes);
  st->set_min_version(s.min_version);
  st->set_max_version(s.max_version);
  st->set_live_workers(s.live_workers);
  st->set_dead_workers_total(s.dead_workers_total);
  st->set_pushes(s.pushes);
  st->set_pulls(s.pulls);
  st->set_refused(s.refused);
  st->set_checkpoint_step(s.checkpoint_step);
  st->set_incarnation(s.incarnation);
  st->set_timeline(s.timeline);
  st->set_awaiting_rewind(s.awaiting_rewind);
  for (int64_t step : s.checkpoint_steps) st->add_checkpoint_steps(step);
  st->set_waiting_pulls(s.waiting_pulls);
}

// Admin: status, a checkpoint now, or a stop (answered before it happens).
class AdminReactor final : public ProtoReactor<wire::AdminRequest> {
 public:
  AdminReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core, std::function<void()> stop)
      : ProtoReactor(ctx, core), stop_(std::move(stop)) {}

 private:
  void Serve(const wire::AdminRequest& req) override {
    wire::AdminResponse resp;
    switch (req.action()) {
      case wire::ADMIN_STATUS:
        break;
      case wire::ADMIN_CHECKPOINT_NOW: {
        absl::StatusOr<std::string> path = core_->CheckpointNow();
        if (!path.ok()) return Reply(path.status());
        resp.set_checkpoint_path(*path);
        break;
      }
      case wire::ADMIN_STOP:
        if (!stop_) return Refuse(absl::FailedPreconditionError("this server cannot be stopped remotely"));
        spdlog::warn("stop requested by an admin call from {}", ctx_->peer());
        break;
      default:
        return Refuse(absl::InvalidArgumentError(absl::StrCat("unknown admin action ", req.action())));
    }
    FillStatus(core_, resp.mutable_status());
    Reply(absl::OkStatus(), MessageBuffer(resp));
    if (req.action() == wire::ADMIN_STOP) stop_();
  }
  const std::function<void()> stop_;
};

// Pull in plain protobuf: the weights are copied into the answer's bytes.
class PullReactor final : public ProtoReactor<wire::PullRequest> {
 public:
  using ProtoReactor::ProtoReactor;

 private:
  void Serve(const wire::PullRequest& req) override {
    const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req.dtype());
    if (!dtype.ok()) return Refuse(dtype.status());
    const bool await_only = req.await_only();
    core_->Pull(req.session_id(), req.step(), PullKeys(req), await_only ? wire::DTYPE_UNSPECIFIED : *dtype,
                req.after_own_push(), Deadline(),
                [this, dtype = *dtype, await_only](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                  if (!chunks.ok()) return Reply(chunks.status());
                  wire::PullResponse resp;
                  for (PulledChunk& c : *chunks) Encode(c, await_only ? wire::DTYPE_UNSPECIFIED : dtype, resp.add_chunks());
                  Reply(absl::OkStatus(), MessageBuffer(resp));
                });
  }
  static void Encode(const PulledChunk& c, wire::DType dtype, wire::Chunk* out) {
    out->mutable_key()->set_tensor(c.key.tensor);
    out->mutable_key()->set_chunk(c.key.chunk);
    out->set_dtype(dtype);
    out->set_version(c.version);
    if (dtype == wire::DTYPE_UNSPECIFIED) return;  // an await: versions only
    const int64_t n = static_cast<int64_t>(c.weights->size());
    if (dtype == wire::DTYPE_FLOAT32) {
      out->set_data(reinterpret_cast<const char*>(c.weights->data()), n * sizeof(float));
      return;
    }
    std::vector<uint16_t> narrow(n);
    ToBfloat16(c.weights->data(), n, narrow.data());
    out->set_data(reinterpret_cast<const char*>(narrow.data()), n * 2);
  }
};

template <typename Req, typename Resp>
grpc::ServerGenericBidiReactor* Immediate(grpc::GenericCallbackServerContext* ctx, ParameterServer* core,
                                          absl::StatusOr<Resp> (*handler)(ParameterServer*, const Req&)) {
  auto* r = new ImmediateReactor<Req, Resp>(ctx, core, handler);
  r->Start();
  return r;
}

}  // namespace

grpc::ServerGenericBidiReactor* NewParameterServiceReactor(grpc::GenericCallbackServerContext* ctx,
                                                           ParameterServer* core, const std::function<void()>& stop) {
  const std::string& m = ctx->method();
  constexpr absl::string_view kPrefix = "/shardps.wire.ParameterService/";
  if (!absl::StartsWith(m, kPrefix)) return nullptr;
  const absl::string_view name = absl::string_view(m).substr(kPrefix.size());
  if (name == "Register") return Immediate(ctx, core, &Register);
  if (name == "Init") return Immediate(ctx, core, &Init);
  if (name == "Heartbeat") return Immediate(ctx, core, &Heartbeat);
  if (name == "Rewind") return Immediate(ctx, core, &Rewind);
  if (name == "Replicate") return Immediate(ctx, core, &Replicate);
  if (name == "Join") return Immediate(ctx, core, &Join);
  if (auto* rows = NewRowsReactor(name, ctx, core); rows != nullptr) return rows;
  UnaryReactor* r = nullptr;
  if (name == "Admin") r = new AdminReactor(ctx, core, stop);
  if (name == "Pull") r = new PullReactor(ctx, core);
  if (name == "Push") r = new PushReactor(ctx, core);
  if (r != nullptr) r->Start();
  return r;
}

}  // namespace shardps
