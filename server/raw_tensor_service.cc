#include "server/raw_tensor_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.pb.h"
#include "server/unary_reactor.h"

namespace shardps {
namespace {

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
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    wire::PullRequest req;
    if (!grpc::SerializationTraits<wire::PullRequest>::Deserialize(&request_, &req).ok()) {
      return Refuse(absl::InvalidArgumentError("raw pull request does not parse as PullRequest"));
    }
    const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req.dtype());
    if (!dtype.ok()) return Refuse(dtype.status());
    core_->Pull(req.session_id(), req.step(), PullKeys(req), *dtype, Deadline(),
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
};

}  // namespace

grpc::ServerGenericBidiReactor* NewRawTensorReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core) {
  UnaryReactor* r = nullptr;
  if (ctx->method() == kRawPushMethod) r = new PushReactor(ctx, core);
  if (ctx->method() == kRawPullMethod) r = new PullReactor(ctx, core);
  if (r != nullptr) r->Start();
  return r;
}

}  // namespace shardps
