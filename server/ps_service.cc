#include "server/ps_service.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/wire_dtype.h"

namespace shardps {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::vector<ChunkPayload> PayloadsOf(const google::protobuf::RepeatedPtrField<wire::Chunk>& chunks) {
  std::vector<ChunkPayload> out;
  out.reserve(chunks.size());
  for (const wire::Chunk& c : chunks) {
    out.push_back(ChunkPayload{{c.key().tensor(), c.key().chunk()}, c.dtype(), {c.data()}});
  }
  return out;
}

absl::Time DeadlineOf(grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

grpc::ServerUnaryReactor* PsService::Register(grpc::CallbackServerContext* ctx,
                                              const wire::RegisterRequest* req,
                                              wire::RegisterResponse* resp) {
  absl::StatusOr<JobView> view = JobViewFromProto(req->view());
  if (!view.ok()) return Finish(ctx, core_->RecordRefused(view.status()));
  absl::StatusOr<Registration> reg = core_->Register(req->rank(), *view);
  if (reg.ok()) {
    resp->set_session_id(reg->session_id);
    resp->set_current_step(reg->current_step);
    resp->set_server_id(core_->server_id());
    resp->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(reg->heartbeat_interval));
  }
  return Finish(ctx, reg.status());
}

grpc::ServerUnaryReactor* PsService::Init(grpc::CallbackServerContext* ctx, const wire::InitRequest* req,
                                          wire::InitResponse* resp) {
  absl::StatusOr<Layout> layout = LayoutFromProto(req->layout());
  if (!layout.ok()) return Finish(ctx, core_->RecordRefused(layout.status()));
  absl::StatusOr<wire::InitOutcome> outcome = core_->Init(req->session_id(), *layout, PayloadsOf(req->chunks()));
  if (outcome.ok()) resp->set_outcome(*outcome);
  return Finish(ctx, outcome.status());
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* ctx, const wire::PushRequest* req,
                                          wire::PushResponse* resp) {
  absl::StatusOr<std::vector<wire::PushOutcome>> outcomes =
      core_->Push(req->session_id(), req->step(), PayloadsOf(req->chunks()));
  if (outcomes.ok()) {
    for (wire::PushOutcome o : *outcomes) resp->add_outcomes(o);
  }
  return Finish(ctx, outcomes.status());
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* ctx, const wire::PullRequest* req,
                                          wire::PullResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req->dtype());
  if (!dtype.ok()) {
    reactor->Finish(ToGrpcStatus(core_->RecordRefused(dtype.status())));
    return reactor;
  }
  std::vector<ChunkKey> keys;
  keys.reserve(req->keys_size());
  for (const wire::Key& k : req->keys()) keys.push_back({k.tensor(), k.chunk()});
  core_->Pull(req->session_id(), req->step(), std::move(keys), *dtype, DeadlineOf(ctx),
              [reactor, resp, dtype = *dtype](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                if (chunks.ok()) {
                  for (PulledChunk& c : *chunks) {
                    wire::Chunk* out = resp->add_chunks();
                    out->mutable_key()->set_tensor(c.key.tensor);
                    out->mutable_key()->set_chunk(c.key.chunk);
                    out->set_dtype(dtype);
                    out->set_version(c.version);
                    const int64_t n = static_cast<int64_t>(c.weights->size());
                    if (dtype == wire::DTYPE_FLOAT32) {
                      out->set_data(reinterpret_cast<const char*>(c.weights->data()), n * sizeof(float));
                    } else {
                      std::string* data = out->mutable_data();
                      data->resize(n * 2);
                      std::vector<uint16_t> narrow(n);
                      ToBfloat16(c.weights->data(), n, narrow.data());
                      std::memcpy(data->data(), narrow.data(), n * 2);
                    }
                  }
                }
                reactor->Finish(ToGrpcStatus(chunks.status()));
              });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Heartbeat(grpc::CallbackServerContext* ctx,
                                               const wire::HeartbeatRequest* req,
                                               wire::HeartbeatResponse* resp) {
  absl::StatusOr<int64_t> step = core_->Heartbeat(req->session_id());
  if (step.ok()) resp->set_current_step(*step);
  return Finish(ctx, step.status());
}

grpc::ServerUnaryReactor* PsService::Admin(grpc::CallbackServerContext* ctx, const wire::AdminRequest* req,
                                           wire::AdminResponse* resp) {
  if (req->action() == wire::ADMIN_CHECKPOINT_NOW) {
    absl::StatusOr<std::string> path = core_->CheckpointNow();
    if (!path.ok()) return Finish(ctx, path.status());
    resp->set_checkpoint_path(*path);
  } else if (req->action() != wire::ADMIN_STATUS) {
    return Finish(ctx, core_->RecordRefused(
                           absl::InvalidArgumentError(absl::StrCat("unknown admin action ", req->action()))));
  }
  const ServerStats s = core_->Stats();
  wire::ServerStatus* st = resp->mutable_status();
  st->set_server_id(core_->server_id());
  st->set_mode(ModeToProto(core_->mode()));
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
  return Finish(ctx, absl::OkStatus());
}

}  // namespace shardps
