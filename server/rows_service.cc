#include "server/rows_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <algorithm>
#include <memory>
#include <optional>
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

// A request's tables: its parts, or (a request of one table) `table` with
// every id.
std::vector<SparseStore::Part> PartsOf(const google::protobuf::RepeatedPtrField<wire::RowsPart>& parts,
                                       uint32_t table, size_t id_bytes) {
  std::vector<SparseStore::Part> out;
  if (parts.empty()) return {{table, id_bytes / sizeof(int64_t)}};
  out.reserve(parts.size());
  for (const wire::RowsPart& p : parts) {
    out.push_back({p.table(), p.ids(), p.has_primary() ? std::optional<int>(p.primary()) : std::nullopt});
  }
  return out;
}

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
    // The rows are read (or taken) before PushRows returns; the answer may
    // come later (with --replicas > 1: ParameterServer::PushRows).
    core_->PushRows(req.session_id(), req.step(), PartsOf(req.parts(), req.table(), ids.size()),
                    RowPayload{ids, row_bytes, req.dtype(), &rows}, Deadline(),
                    [this](absl::StatusOr<std::vector<wire::PushOutcome>> outcomes) {
                      if (!outcomes.ok()) return Reply(outcomes.status());
                      wire::PushRowsResponse resp;
                      if (!outcomes->empty()) resp.set_outcome(outcomes->front());
                      for (wire::PushOutcome o : *outcomes) resp.add_outcomes(o);
                      Reply(absl::OkStatus(), MessageBuffer(resp));
                    });
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
    // The request lives as long as the call (the ids' bytes are decoded
    // before any wait).
    core_->PullRows(req_.session_id(), req_.step(), PartsOf(req_.parts(), req_.table(), req_.ids().size()),
                    req_.ids(), Deadline(), [this, dtype = *dtype](absl::StatusOr<std::vector<PulledRows>> rows) {
                      if (!rows.ok()) return Reply(rows.status());
                      wire::PullRowsResponse head;
                      std::vector<BytesField> fields;
                      for (PulledRows& part : *rows) {
                        head.set_version(fields.empty() ? part.version : std::min(head.version(), part.version));
                        fields.push_back(RowsField(std::move(part.rows), dtype));
                      }
                      Reply(absl::OkStatus(), MessageWithBytes(head, fields));
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
