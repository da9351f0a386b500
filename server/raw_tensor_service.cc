#include "server/raw_tensor_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.pb.h"

namespace shardps {
namespace {

absl::Time DeadlineOf(grpc::GenericCallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// One unary call over the bidi generic reactor: read the request, then Handle
// it; Handle (or a callback it arranges) calls Reply exactly once.
class UnaryReactor : public grpc::ServerGenericBidiReactor {
 public:
  explicit UnaryReactor(ParameterServer* core) : core_(core) {}
  void Start() { StartRead(&request_); }

 protected:
  virtual void Handle() = 0;
  // Answers a malformed frame, counting and logging it as refused (the core
  // does so for the requests it refuses itself).
  void Refuse(const absl::Status& status) { Reply(core_->RecordRefused(status)); }
  void Reply(const absl::Status& status, grpc::ByteBuffer response = {}) {
    if (!status.ok()) return Finish(ToGrpcStatus(status));
    response_ = std::move(response);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }
  ParameterServer* const core_;
  grpc::ByteBuffer request_;

 private:
  void OnReadDone(bool ok) override {
    if (!ok) return Refuse(absl::InvalidArgumentError("no request message"));
    Handle();
  }
  void OnDone() override { delete this; }
  grpc::ByteBuffer response_;
};

class PushReactor final : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    wire::PushRequest req;
    absl::StatusOr<std::unique_ptr<FrameReader>> frame = FrameReader::Parse(request_, &req);
    if (!frame.ok()) return Refuse(frame.status());
    int64_t declared = 0;
    for (const wire::Chunk& c : req.chunks()) {
      if (c.raw_bytes() < 0 || !c.data().empty()) {
        return Refuse(absl::InvalidArgumentError(absl::StrCat("raw push chunk ", c.key().tensor(), "/", c.key().chunk(),
                                                             " needs raw_bytes >= 0 and no data")));
      }
      declared += c.raw_bytes();
    }
    if (declared != (*frame)->remaining()) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat("raw push: chunks declare ", declared,
                                                           " payload bytes; the frame carries ",
                                                           (*frame)->remaining())));
    }
    std::vector<ChunkPayload> payloads;
    payloads.reserve(req.chunks_size());
    for (const wire::Chunk& c : req.chunks()) {
      payloads.push_back({{c.key().tensor(), c.key().chunk()}, c.dtype(), (*frame)->NextPieces(c.raw_bytes())});
    }
    absl::StatusOr<std::vector<wire::PushOutcome>> outcomes = core_->Push(req.session_id(), req.step(), payloads);
    if (!outcomes.ok()) return Reply(outcomes.status());
    wire::PushResponse resp;
    for (wire::PushOutcome o : *outcomes) resp.add_outcomes(o);
    Reply(absl::OkStatus(), MessageBuffer(resp));
  }
};

// A pulled chunk's weights as the answer's payload: shared as they are for
// float32 (no copy), narrowed into a new buffer for bfloat16.
SharedPayload Encode(std::shared_ptr<const std::vector<float>> weights, wire::DType dtype) {
  if (dtype == wire::DTYPE_FLOAT32) return ShareFloats(std::move(weights));
  const size_t n = weights->size();
  std::shared_ptr<uint16_t[]> narrow(new uint16_t[n]);  // not zeroed: every value is written
  ToBfloat16(weights->data(), static_cast<int64_t>(n), narrow.get());
  const absl::string_view bytes(reinterpret_cast<const char*>(narrow.get()), n * 2);
  return {std::move(narrow), bytes};
}

class PullReactor final : public UnaryReactor {
 public:
  PullReactor(ParameterServer* core, absl::Time deadline) : UnaryReactor(core), deadline_(deadline) {}

 private:
  void Handle() override {
    wire::PullRequest req;
    if (!grpc::SerializationTraits<wire::PullRequest>::Deserialize(&request_, &req).ok()) {
      return Refuse(absl::InvalidArgumentError("raw pull request does not parse as PullRequest"));
    }
    const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req.dtype());
    if (!dtype.ok()) return Refuse(dtype.status());
    std::vector<ChunkKey> keys;
    keys.reserve(req.keys_size());
    for (const wire::Key& k : req.keys()) keys.push_back({k.tensor(), k.chunk()});
    core_->Pull(req.session_id(), req.step(), std::move(keys), *dtype, deadline_,
                [this, dtype = *dtype](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                  if (!chunks.ok()) return Reply(chunks.status());
                  wire::PullResponse resp;
                  std::vector<SharedPayload> payloads;
                  payloads.reserve(chunks->size());
                  for (PulledChunk& c : *chunks) {
                    wire::Chunk* out = resp.add_chunks();
                    out->mutable_key()->set_tensor(c.key.tensor);
                    out->mutable_key()->set_chunk(c.key.chunk);
                    out->set_dtype(dtype);
                    out->set_version(c.version);
                    payloads.push_back(Encode(std::move(c.weights), dtype));
                    out->set_raw_bytes(static_cast<int64_t>(payloads.back().bytes.size()));
                  }
                  Reply(absl::OkStatus(), EncodeFrame(resp, std::move(payloads)));
                });
  }
  const absl::Time deadline_;
};

class UnknownMethodReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit UnknownMethodReactor(const std::string& method) {
    Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, absl::StrCat("unknown method ", method)));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerGenericBidiReactor* RawTensorService::CreateReactor(grpc::GenericCallbackServerContext* ctx) {
  if (ctx->method() == kRawPushMethod) {
    auto* r = new PushReactor(core_);
    r->Start();
    return r;
  }
  if (ctx->method() == kRawPullMethod) {
    auto* r = new PullReactor(core_, DeadlineOf(ctx));
    r->Start();
    return r;
  }
  return new UnknownMethodReactor(ctx->method());
}

}  // namespace shardps
