// GrpcPsClient: pushes and pulls of sparse tables' rows (ps_client.h,
// PushRowsAsync and PullRowsAsync). A batch's ids are planned once
// (client/row_batches.h); each server then gets one request per table (more
// only past the message size limit). The requests take their turn in the
// transfer queues beside the dense ones (client/transfer_queue.h): a pull of
// rows ahead of the step's dense tensors, as embeddings feed a model's first
// layers, and a push of rows after them, as backward reaches embeddings last.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/grpc_ps_client.h"
#include "client/row_batches.h"
#include "common/proto_bytes.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"

namespace shardps {

// One PushRows request: its small fields, and its ids and rows as views
// into memory that the caller lends until the call completes (ids and
// gradients that go as they came) or that `owner` keeps (sums, bfloat16).
struct RowsPushPart {
  wire::PushRowsRequest head;
  BytesField ids{4, {}, nullptr};
  BytesField rows{5, {}, nullptr};
};

namespace {
constexpr char kPushRowsMethod[] = "/shardps.wire.ParameterService/PushRows";
constexpr char kPullRowsMethod[] = "/shardps.wire.ParameterService/PullRows";

// Room left in a message for everything but the ids and rows.
constexpr int64_t kMessageOverhead = 64 << 10;

size_t RowsPerRequest(int64_t max_message_bytes, int dim, wire::DType dtype) {
  const int64_t per_row = 8 + static_cast<int64_t>(dim) * ValueBytes(dtype);
  return static_cast<size_t>(std::max<int64_t>(1, (max_message_bytes - kMessageOverhead) / per_row));
}

// `values` floats at `rows` as the rows field in `dtype`: a view of them
// (float32, kept alive by `owner` or, when null, by the caller), or a
// bfloat16 copy the field owns.
BytesField RowsField(const float* rows, size_t values, wire::DType dtype, std::shared_ptr<const void> owner) {
  if (dtype == wire::DTYPE_BFLOAT16) {
    auto narrow = std::make_shared<std::string>(values * 2, '\0');
    ToBfloat16(rows, static_cast<int64_t>(values), reinterpret_cast<uint16_t*>(narrow->data()));
    return {5, *narrow, narrow};
  }
  return {5, {reinterpret_cast<const char*>(rows), values * sizeof(float)}, std::move(owner)};
}
// The rows of a PullRows answer from server `s`: `values` floats into
// `out`, read straight from the received slices (float32), or widened from
// bfloat16. INTERNAL when the answer does not hold exactly that many.
absl::Status ReadPulledRows(const grpc::ByteBuffer& answer, int s, float* out, size_t values, wire::DType dtype) {
  const size_t want = values * ValueBytes(dtype);
  std::string narrow;
  bool seen = false;
  wire::PullRowsResponse head;
  absl::Status st = ParseWithBytes(
      answer, {1},
      [&](int, size_t size) -> absl::StatusOr<char*> {
        if (seen || size != want) {
          return absl::InternalError(absl::StrCat("server ", s, " answered ", seen ? "a second field of rows" : "",
                                                  seen ? "" : absl::StrCat(size, " bytes of rows; want ", want)));
        }
        seen = true;
        if (dtype != wire::DTYPE_BFLOAT16) return reinterpret_cast<char*>(out);
        narrow.resize(size);
        return narrow.data();
      },
      &head);
  if (!st.ok()) return st;
  if (!seen && want != 0) {
    return absl::InternalError(absl::StrCat("server ", s, " answered 0 bytes of rows; want ", want));
  }
  if (dtype == wire::DTYPE_BFLOAT16) FromBfloat16(narrow.data(), static_cast<int64_t>(values), out);
  return absl::OkStatus();
}

}  // namespace

absl::Status PsClient::PushRows(int64_t step, uint32_t table, const int64_t* ids, size_t n, const float* grads) {
  return Blocking([&](Done done) { PushRowsAsync(step, table, ids, n, grads, std::move(done)); });
}

absl::Status PsClient::PullRows(int64_t step, uint32_t table, const int64_t* ids, size_t n, float* rows) {
  return Blocking([&](Done done) { PullRowsAsync(step, table, ids, n, rows, std::move(done)); });
}

absl::StatusOr<int> GrpcPsClient::TableDim(uint32_t table) const {
  const std::vector<TableSpec>& tables = options_.layout.tables;
  if (table >= tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " is not in the layout, which has ", tables.size(), " sparse tables"));
  }
  return tables[table].dim;
}

void GrpcPsClient::PushRowsAsync(int64_t step, uint32_t table, const int64_t* ids, size_t n, const float* grads,
                                 Done done) {
  if (shut_down_) return done(absl::CancelledError("client is shut down"));
  const absl::StatusOr<int> dim = TableDim(table);
  if (!dim.ok()) return done(dim.status());
  const int servers = static_cast<int>(connections_.size());
  auto plan = std::make_shared<const RowPlan>(PlanRows(ids, n, servers));
  // Distinct ids in server order go as they came: the caller lends them
  // until the call completes. Otherwise the sums, which the requests keep.
  std::shared_ptr<const std::vector<float>> sums;
  if (!plan->identity) sums = std::make_shared<const std::vector<float>>(SumRows(*plan, grads, n, *dim));
  const float* rows = plan->identity ? grads : sums->data();
  const wire::DType dtype = options_.wire_dtype;
  const size_t limit = RowsPerRequest(options_.max_message_bytes, *dim, dtype);
  const bool sync = options_.job.mode == Mode::kSync;
  std::vector<std::pair<int, std::shared_ptr<RowsPushPart>>> parts;
  for (int s = 0; s < servers; ++s) {
    // Every server hears from every worker each step, with no ids where it
    // has none: a sync step needs it, and in async and ssp a server with no
    // dense keys counts the workers' clocks by it.
    const size_t begin = plan->server_begin[s], count = plan->server_begin[s + 1] - begin;
    if (count > limit && sync) {
      return done(absl::ResourceExhaustedError(absl::StrCat(
          "push of ", count, " rows of table ", table, " to server ", s, " is over the message limit of ",
          options_.max_message_bytes, " bytes (", limit,
          " rows); a sync step takes one request per server per table: use fewer ids a step or more servers")));
    }
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += limit) {
      const size_t take = std::min(limit, count - off);
      auto part = std::make_shared<RowsPushPart>();
      part->head.set_step(step);
      part->head.set_table(table);
      part->head.set_dtype(dtype);
      part->ids.bytes = {reinterpret_cast<const char*>(plan->ids.data() + begin + off), take * sizeof(int64_t)};
      part->ids.owner = plan;
      part->rows = RowsField(rows + (begin + off) * *dim, take * *dim, dtype, sums);
      parts.emplace_back(s, std::move(part));
      if (count == 0) break;
    }
  }
  if (parts.empty()) return done(absl::OkStatus());
  auto fanout = std::make_shared<Fanout>(static_cast<int>(parts.size()), std::move(done));
  for (auto& [s, part] : parts) {
    TransferPriority priority = PriorityOf(step, 0, s);
    priority.order = static_cast<int64_t>(options_.layout.tensors.size() + table);  // after the dense tensors
    const int64_t bytes = static_cast<int64_t>(part->ids.bytes.size() + part->rows.bytes.size());
    push_queue_.Submit(priority, bytes,
                       [this, s = s, part = std::move(part), fanout](std::function<void()> finished) mutable {
                         SendRows(s, std::move(part), std::move(fanout), std::move(finished));
                       });
  }
}

void GrpcPsClient::SendRows(int s, std::shared_ptr<RowsPushPart> part, std::shared_ptr<Fanout> fanout,
                            std::function<void()> finished) {
  auto resp = std::make_shared<grpc::ByteBuffer>();
  CallSpec spec = TransferSpec("push of rows", options_.push_timeout);
  spec.lane = Lane::kPushes;
  connections_[s]->Call(
      spec,
      [part, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
        part->head.set_session_id(session);
        auto request = std::make_shared<grpc::ByteBuffer>(MessageWithBytes(part->head, {part->ids, part->rows}));
        stub.raw->UnaryCall(ctx, kPushRowsMethod, grpc::StubOptions(), request.get(), resp.get(),
                            [request, cb = std::move(cb)](grpc::Status st) { cb(std::move(st)); });
      },
      [fanout, resp, finished = std::move(finished)](absl::Status st) {
        finished();
        fanout->Finish(st);
      });
}

void GrpcPsClient::PullRowsAsync(int64_t step, uint32_t table, const int64_t* ids, size_t n, float* rows,
                                 Done done) {
  if (shut_down_) return done(absl::CancelledError("client is shut down"));
  const absl::StatusOr<int> dim = TableDim(table);
  if (!dim.ok()) return done(dim.status());
  if (n == 0) return done(absl::OkStatus());
  const int servers = static_cast<int>(connections_.size());
  auto plan = std::make_shared<const RowPlan>(PlanRows(ids, n, servers));
  // Distinct ids in server order are answered straight into the caller's
  // rows; otherwise into plan order, then scattered to every position.
  std::shared_ptr<std::vector<float>> pulled;
  if (!plan->identity) pulled = std::make_shared<std::vector<float>>(plan->ids.size() * *dim);
  float* into = plan->identity ? rows : pulled->data();
  const wire::DType dtype = options_.wire_dtype;
  const size_t limit = RowsPerRequest(options_.max_message_bytes, *dim, dtype);
  struct Part {
    int server;
    size_t begin, count;
  };
  std::vector<Part> parts;
  for (int s = 0; s < servers; ++s) {
    const size_t begin = plan->server_begin[s], count = plan->server_begin[s + 1] - begin;
    for (size_t off = 0; off < count; off += limit) parts.push_back({s, begin + off, std::min(limit, count - off)});
  }
  auto fanout = std::make_shared<Fanout>(
      static_cast<int>(parts.size()), [plan, pulled, rows, dim = *dim, done = std::move(done)](absl::Status st) {
        if (st.ok() && pulled != nullptr) ScatterRows(*plan, pulled->data(), dim, rows);
        done(st);
      });
  const int64_t order = static_cast<int64_t>(table) - static_cast<int64_t>(options_.layout.tables.size());
  for (const Part& p : parts) {
    auto req = std::make_shared<wire::PullRowsRequest>();
    req->set_step(step);
    req->set_table(table);
    req->set_dtype(dtype);
    req->set_ids(reinterpret_cast<const char*>(plan->ids.data() + p.begin), p.count * sizeof(int64_t));
    const size_t values = p.count * *dim;
    float* out = into + p.begin * *dim;
    TransferPriority priority = PriorityOf(step, 0, p.server);
    priority.order = order;  // ahead of the dense tensors
    pull_queue_.Submit(priority, static_cast<int64_t>(values * ValueBytes(dtype)),
                       [this, req, out, values, dtype, fanout, pulled, s = p.server](std::function<void()> finished) {
                         SendRowsPull(s, req, out, values, dtype, fanout, pulled, std::move(finished));
                       });
  }
}

void GrpcPsClient::SendRowsPull(int s, std::shared_ptr<wire::PullRowsRequest> req, float* out, size_t values,
                                wire::DType dtype, std::shared_ptr<Fanout> fanout, std::shared_ptr<const void> keep,
                                std::function<void()> finished) {
  auto resp = std::make_shared<grpc::ByteBuffer>();
  connections_[s]->Call(
      TransferSpec("pull of rows", options_.pull_timeout),
      [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
        req->set_session_id(session);
        auto request = std::make_shared<grpc::ByteBuffer>(MessageBuffer(*req));
        stub.raw->UnaryCall(ctx, kPullRowsMethod, grpc::StubOptions(), request.get(), resp.get(),
                            [request, cb = std::move(cb)](grpc::Status st) { cb(std::move(st)); });
      },
      [fanout, resp, out, values, dtype, keep, s, finished = std::move(finished)](absl::Status st) {
        finished();
        if (st.ok()) st = ReadPulledRows(*resp, s, out, values, dtype);
        fanout->Finish(st);
      });
}

}  // namespace shardps
