#include "server/rows_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/proto_bytes.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "proto/shardps.pb.h"
#include "server/unary_reactor.h"

namespace shardps {
namespace {

// PushRows: ids (field 4) and rows (field 5) read into memory of their own;
// float32 rows into the vector the store keeps for a sync step.
class PushRowsReactor final : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    wire::PushRowsRequest req;
    std::string ids;
    std::vector<float> rows;
    size_t row_size = 0;  // bytes: bfloat16 rows may fill half of the last float
    bool seen[2] = {false, false};
    const absl::Status parsed = ParseWithBytes(
        request_, {4, 5},
        [&](int number, size_t size) -> absl::StatusOr<char*> {
          if (seen[number - 4]) {
            return absl::InvalidArgumentError(absl::StrCat("push of rows: field ", number, " comes twice"));
          }
          seen[number - 4] = true;
          if (number == 4) {
            ids.resize(size);
            return ids.data();
          }
          row_size = size;
          rows.resize((size + 3) / 4);
          return reinterpret_cast<char*>(rows.data());
        },
        &req);
    if (!parsed.ok()) return Refuse(parsed);
    const absl::string_view row_bytes(reinterpret_cast<const char*>(rows.data()), row_size);
    absl::StatusOr<wire::PushOutcome> outcome =
        core_->PushRows(req.session_id(), req.step(), req.table(), RowPayload{ids, row_bytes, req.dtype(), &rows});
    if (!outcome.ok()) return Reply(outcome.status());
    wire::PushRowsResponse resp;
    resp.set_outcome(*outcome);
    Reply(absl::OkStatus(), MessageBuffer(resp));
  }
};

// PullRows: the rows in the answer, float32 or bfloat16, sent from the
// memory they were read into.
class PullRowsReactor final : public UnaryReactor {
 public:
  using UnaryReactor::UnaryReactor;

 private:
  void Handle() override {
    if (!grpc::SerializationTraits<wire::PullRowsRequest>::Deserialize(&request_, &req_).ok()) {
      return Refuse(absl::InvalidArgumentError("request does not parse as shardps.wire.PullRowsRequest"));
    }
    const absl::StatusOr<wire::DType> dtype = PullAnswerDType(req_.dtype());
    if (!dtype.ok()) return Refuse(dtype.status());
    // The request outlives the call: the ids are read from it after a wait.
    core_->PullRows(req_.session_id(), req_.step(), req_.table(), req_.ids(), Deadline(),
                    [this, dtype = *dtype](absl::StatusOr<PulledRows> rows) {
                      if (!rows.ok()) return Reply(rows.status());
                      wire::PullRowsResponse head;
                      head.set_version(rows->version);
                      Reply(absl::OkStatus(), MessageWithBytes(head, {RowsField(std::move(rows->rows), dtype)}));
                    });
  }
  static BytesField RowsField(std::vector<float> rows, wire::DType dtype) {
    const int64_t n = static_cast<int64_t>(rows.size());
    if (dtype == wire::DTYPE_FLOAT32) {
      auto owned = std::make_shared<const std::vector<float>>(std::move(rows));
      return {1, {reinterpret_cast<const char*>(owned->data()), owned->size() * sizeof(float)}, owned};
    }
    auto narrow = std::make_shared<std::string>(n * 2, '\0');
    ToBfloat16(rows.data(), n, reinterpret_cast<uint16_t*>(narrow->data()));
    return {1, *narrow, narrow};
  }
  wire::PullRowsRequest req_;
};

}  // namespace

grpc::ServerGenericBidiReactor* NewRowsReactor(absl::string_view name, grpc::GenericCallbackServerContext* ctx,
                                               ParameterServer* core) {
  UnaryReactor* r = nullptr;
  if (name == "PushRows") r = new PushRowsReactor(ctx, core);
  if (name == "PullRows") r = new PullRowsReactor(ctx, core);
  if (r != nullptr) r->Start();
  return r;
}

}  // namespace shardps
