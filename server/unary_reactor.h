// One unary call served through gRPC's generic callback API: read the
// request bytes, Handle() them, and answer once with Reply(). Every answer,
// error or not, carries the server's incarnation in its trailing metadata
// (common/rpc_metadata.h). Refusals of malformed requests are counted and
// logged by the core, like the core's own refusals.
//
// A reactor deletes itself when gRPC is done with the call (OnDone).
#ifndef SHARDPS_SERVER_UNARY_REACTOR_H_
#define SHARDPS_SERVER_UNARY_REACTOR_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/rpc_metadata.h"
#include "common/tensor_frame.h"
#include "common/trace.h"
#include "proto/shardps.pb.h"
#include "server/parameter_server.h"
#include "server/view_metadata.h"

namespace shardps {

class UnaryReactor : public grpc::ServerGenericBidiReactor {
 public:
  // `trace` (may be null) is for subclasses that record their calls.
  UnaryReactor(grpc::GenericCallbackServerContext* ctx, ParameterServer* core, Trace* trace = nullptr)
      : ctx_(ctx), core_(core), trace_(trace), started_(absl::Now()) {}
  void Start() { StartRead(&request_); }

 protected:
  virtual void Handle() = 0;
  // Answers a request that never reached the core (malformed), counting and
  // logging it as refused.
  void Refuse(const absl::Status& status) { Reply(core_->RecordRefused(status)); }
  void Reply(const absl::Status& status, grpc::ByteBuffer response = {}) {
    ctx_->AddTrailingMetadata(kIncarnationKey, IncarnationText(core_->incarnation()));
    for (const auto& [key, value] : ViewMetadata(*core_)) ctx_->AddTrailingMetadata(key, value);
    if (!status.ok()) return Finish(ToGrpcStatus(status));
    response_ = std::move(response);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }
  // The answer to a push (raw or protobuf): its outcomes, or the core's error.
  void ReplyPush(absl::StatusOr<std::vector<wire::PushOutcome>> outcomes) {
    if (!outcomes.ok()) return Reply(outcomes.status());
    wire::PushResponse resp;
    for (wire::PushOutcome o : *outcomes) resp.add_outcomes(o);
    Reply(absl::OkStatus(), MessageBuffer(resp));
  }
  // The call's deadline as absl::Time (InfiniteFuture when none).
  absl::Time Deadline() const {
    const auto deadline = ctx_->deadline();
    if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
    return absl::FromChrono(deadline);
  }

  // Runs when gRPC is done with the call (the answer is written out), with
  // the times the call started (its first bytes arrived) and its request was
  // read whole.
  virtual void Finished(absl::Time started, absl::Time read) {}

  grpc::GenericCallbackServerContext* const ctx_;
  ParameterServer* const core_;
  Trace* const trace_;
  grpc::ByteBuffer request_;

 private:
  void OnReadDone(bool ok) override {
    read_ = absl::Now();
    if (!ok) return Refuse(absl::InvalidArgumentError("no request message"));
    Handle();
  }
  void OnDone() override {
    Finished(started_, read_);
    delete this;
  }
  const absl::Time started_;
  absl::Time read_ = absl::InfinitePast();
  grpc::ByteBuffer response_;
};

// The keys a pull names, in its order.
inline std::vector<ChunkKey> PullKeys(const wire::PullRequest& req) {
  std::vector<ChunkKey> keys;
  keys.reserve(req.keys_size());
  for (const wire::Key& k : req.keys()) keys.push_back({k.tensor(), k.chunk()});
  return keys;
}

}  // namespace shardps

#endif  // SHARDPS_SERVER_UNARY_REACTOR_H_
