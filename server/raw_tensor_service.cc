#include "server/raw_tensor_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/connection_priority.h"
#include "common/grpc_status.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.pb.h"
#include "server/payload_blocks.h"
#include "server/unary_reactor.h"

namespace shardps {
namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// "from ipv4:10.77.0.3:41234": who sent a call, for the trace.
std::string From(grpc::GenericCallbackServerContext* ctx) { return absl::StrCat("from ", ctx->peer()); }

class PushReactor final : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    wire::PushRequest req;
    absl::StatusOr<std::unique_ptr<FrameReader>> frame = FrameReader::Parse(request_, &req);
    if (!frame.ok()) return Refuse(frame.status());
    step_ = req.step();
    bytes_ = (*frame)->remaining();
    int64_t declared = 0;
    for (const wire::Chunk& c : req.chunks()) {
      if (c.raw_bytes() < 0 || !c.data().empty()) {
        return Refuse(absl::InvalidArgumentError(absl::StrCat("raw push chunk ", c.key().tensor(), "/", c.key().chunk(),
                                                             " needs raw_bytes >= 0 and no data")));
      }
      // Held at INT64_MAX: a peer's sizes may add up past it (tests:wire_fuzz_test).
      declared = c.raw_bytes() > kUnbounded - declared ? kUnbounded : declared + c.raw_bytes();
    }
    if (declared != (*frame)->remaining()) {
      return Refuse(absl::InvalidArgumentError(
          absl::StrCat("raw push: chunks declare ", declared == kUnbounded ? "over 2^63" : absl::StrCat(declared),
                       " payload bytes; the frame carries ", (*frame)->remaining())));
    }
    std::vector<ChunkPayload> payloads;
    payloads.reserve(req.chunks_size());
    for (const wire::Chunk& c : req.chunks()) {
      payloads.push_back(
          {{c.key().tensor(), c.key().chunk()}, c.dtype(), (*frame)->NextPieces(c.raw_bytes()), BaseVersionOf(c)});
    }
    // The payloads are read before Push returns; the answer may come later.
    core_->Push(req.session_id(), req.step(), payloads, Deadline(),
                [this](absl::StatusOr<std::vector<wire::PushOutcome>> outcomes) { ReplyPush(std::move(outcomes)); });
  }
  // The push's arrival: from its first bytes to the whole request.
  void Finished(absl::Time started, absl::Time read) override {
    if (trace_ == nullptr || read == absl::InfinitePast()) return;
    trace_->Async("push in", absl::StrCat("push ", From(ctx_)), started, read, {{"step", step_}, {"bytes", bytes_}});
  }
  int64_t step_ = -1, bytes_ = 0;
};

// The updates a raw Replicate frame carries: per key, raw_values weights and
// raw_slots slots of as many values, copied once out of the received slices.
// INVALID_ARGUMENT naming the fault for a frame that does not add up.
absl::StatusOr<std::vector<ReplicaUpdate>> RawReplicaUpdates(const wire::ReplicateRequest& req, FrameReader& frame) {
  constexpr int kMaxSlots = 8;  // Adam keeps 2; room to spare, but not a count that overflows
  int64_t declared = 0;
  for (const wire::ReplicaKey& k : req.keys()) {
    const int64_t values = k.raw_values();
    if (!k.weights().empty() || k.slots_size() != 0 || values < 0 || k.raw_slots() < 0 ||
        k.raw_slots() > kMaxSlots || values > frame.remaining() / 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "raw replica key ", k.key().tensor(), "/", k.key().chunk(), " needs raw_values in [0, payload / 4], ",
          "raw_slots in [0, ", kMaxSlots, "] and no weights or slots in the header"));
    }
    declared += values * 4 * (1 + k.raw_slots());
  }
  constexpr int kMaxRowFloats = 1 << 16;
  for (const wire::ReplicaRows& r : req.rows()) {
    if (r.count() < 0 || r.row_floats() < (r.copy_done() ? 0 : 1) || r.row_floats() > kMaxRowFloats ||
        r.count() > frame.remaining() / (8 + 4 * static_cast<int64_t>(r.row_floats())) ||
        (r.copy_done() && r.count() != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("raw replica rows of table ", r.table(),
                                                     " need count in [0, payload / row bytes] and row_floats in [1, ",
                                                     kMaxRowFloats, "]"));
    }
    if ((r.admission_size() != 0 && r.admission_size() != r.count()) ||
        std::any_of(r.admission().begin(), r.admission().end(), [](int32_t a) { return a < -1; })) {
      return absl::InvalidArgumentError(absl::StrCat("raw replica rows of table ", r.table(), ": ", r.admission_size(),
                                                     " admission counts for ", r.count(),
                                                     " ids; want none or one per id, each -1 or more"));
    }
    declared += r.count() * (8 + 4 * static_cast<int64_t>(r.row_floats()));
  }
  if (declared != frame.remaining()) {
    return absl::InvalidArgumentError(absl::StrCat("raw replicate: keys and rows declare ", declared,
                                                   " payload bytes; the frame carries ", frame.remaining()));
  }
  std::vector<ReplicaUpdate> updates;
  updates.reserve(req.keys_size());
  for (const wire::ReplicaKey& k : req.keys()) {
    const size_t values = static_cast<size_t>(k.raw_values());
    auto weights = std::make_shared<std::vector<float>>(FloatsOf(frame.NextPieces(values * 4)));
    ReplicaUpdate u{{k.key().tensor(), k.key().chunk()}, k.version(), std::move(weights), {}, {}};
    for (int i = 0; i < k.raw_slots(); ++i) u.slots.push_back(FloatsOf(frame.NextPieces(values * 4)));
    u.last_pushed_step.assign(k.last_pushed_step().begin(), k.last_pushed_step().end());
    updates.push_back(std::move(u));
  }
  return updates;
}

// The rows a raw Replicate frame carries after its keys (RawReplicaUpdates
// has checked their sizes against the frame).
std::vector<RowsReplica> RawReplicaRows(const wire::ReplicateRequest& req, FrameReader& frame) {
  std::vector<RowsReplica> rows;
  rows.reserve(req.rows_size());
  for (const wire::ReplicaRows& r : req.rows()) {
    const size_t n = static_cast<size_t>(r.count());
    auto ids = std::make_shared<std::vector<int64_t>>(n);
    frame.CopyNext(n * 8, reinterpret_cast<char*>(ids->data()));
    auto values = std::make_shared<std::vector<float>>(FloatsOf(frame.NextPieces(n * 4 * static_cast<size_t>(r.row_floats()))));
    RowsReplica& copy = rows.emplace_back(RowsReplica{r.primary(), r.table(), r.version(), r.row_floats(),
                                                      std::move(ids), std::move(values),
                                                      {r.last_pushed_step().begin(), r.last_pushed_step().end()},
                                                      r.copy_done()});
    if (r.admission_size() > 0) {
      copy.admission = std::make_shared<const std::vector<int32_t>>(r.admission().begin(), r.admission().end());
    }
  }
  return rows;
}

// A primary's keys for the backup, in the raw framing (server/grpc_replica_link.h).
class ReplicateReactor final : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    wire::ReplicateRequest req;
    absl::StatusOr<std::unique_ptr<FrameReader>> frame = FrameReader::Parse(request_, &req);
    if (!frame.ok()) return Refuse(frame.status());
    absl::StatusOr<std::vector<ReplicaUpdate>> updates = RawReplicaUpdates(req, **frame);
    if (!updates.ok()) return Refuse(updates.status());
    const std::vector<RowsReplica> rows = RawReplicaRows(req, **frame);
    absl::Status applied = core_->ApplyReplica(req.from_server(), req.timeline(), *updates);  // counts its refusals
    if (applied.ok() && !rows.empty()) applied = core_->ApplyRowsReplica(req.from_server(), req.timeline(), rows);
    if (!applied.ok()) return Reply(applied);
    Reply(absl::OkStatus(), MessageBuffer(wire::ReplicateResponse()));
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
  PullReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core, Trace* trace,
              ConnectionPriorityMarker* lifted)
      : UnaryReactor(ctx, core, trace), lifted_(lifted) {}

 private:
  void Handle() override {
    wire::PullRequest req;
    if (!grpc::SerializationTraits<wire::PullRequest>::Deserialize(&request_, &req).ok()) {
      return Refuse(absl::InvalidArgumentError("raw pull request does not parse as PullRequest"));
    }
    const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req.dtype());
    if (!dtype.ok()) return Refuse(dtype.status());
    step_ = req.step();
    await_only_ = req.await_only();
    if (req.first_weights() && lifted_ != nullptr) lifted_->Mark(ctx_->peer());
    core_->Pull(req.session_id(), req.step(), PullKeys(req), await_only_ ? wire::DTYPE_UNSPECIFIED : *dtype,
                req.after_own_push(), Deadline(),
                [this, dtype = *dtype](absl::StatusOr<std::vector<PulledChunk>> chunks) {
                  ready_ = absl::Now();
                  if (!chunks.ok()) return Reply(chunks.status());
                  if (await_only_) return Reply(absl::OkStatus(), EncodeFrame(Versions(*chunks), std::vector<SharedPayload>{}));
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
                    bytes_ += out->raw_bytes();
                  }
                  Reply(absl::OkStatus(), EncodeFrame(resp, std::move(payloads)));
                });
  }
  // The pull's wait for its weights, then the answer's way out.
  void Finished(absl::Time started, absl::Time read) override {
    if (trace_ == nullptr || ready_ == absl::InfinitePast()) return;
    const absl::Time done = absl::Now();
    if (await_only_) {
      trace_->Async("awaits", absl::StrCat("await ", From(ctx_)), read, ready_, {{"step", step_}});
      return;
    }
    trace_->Async("answer", absl::StrCat("answer ", From(ctx_)), ready_, done, {{"step", step_}, {"bytes", bytes_}});
  }
  // An await's answer: the keys and their versions, no values.
  static wire::PullResponse Versions(const std::vector<PulledChunk>& chunks) {
    wire::PullResponse resp;
    for (const PulledChunk& c : chunks) {
      wire::Chunk* out = resp.add_chunks();
      out->mutable_key()->set_tensor(c.key.tensor);
      out->mutable_key()->set_chunk(c.key.chunk);
      out->set_version(c.version);
      out->set_raw_bytes(0);
    }
    return resp;
  }
  ConnectionPriorityMarker* const lifted_;
  int64_t step_ = -1, bytes_ = 0;
  bool await_only_ = false;
  absl::Time ready_ = absl::InfinitePast();
};

}  // namespace

grpc::ServerGenericBidiReactor* NewRawTensorReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core,
                                                    Trace* trace, ConnectionPriorityMarker* lifted) {
  UnaryReactor* r = nullptr;
  if (ctx->method() == kRawPushMethod) r = new PushReactor(ctx, core, trace);
  if (ctx->method() == kRawPullMethod) r = new PullReactor(ctx, core, trace, lifted);
  if (ctx->method() == kRawReplicateMethod) r = new ReplicateReactor(ctx, core, trace);
  if (r != nullptr) r->Start();
  return r;
}

}  // namespace shardps
