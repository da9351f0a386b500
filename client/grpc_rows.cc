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

// One PullRows request: its small fields and ids, where its answer's
// parts go, and the bytes it brings back.
struct RowsPull {
  wire::PullRowsRequest head;
  std::vector<PulledPlace> into;
  int64_t bytes = 0;
};

// One PushRows request: its small fields, and each table's ids and rows as
// views into memory their owners keep (plans; copies, sums or bfloat16 of
// the gradients) for as long as gRPC holds the request's slices.
struct RowsPushPart {
  wire::PushRowsRequest head;  // with its parts
  std::vector<BytesField> ids, rows;  // the parts' pieces of fields 4 and 5
};

// One table's rows planned for the wire: its distinct ids by server, and
// their values (a push's gradients or sums; a pull's room).
template <typename Value>
struct PlannedRows {
  uint32_t table = 0;
  int dim = 0;
  std::shared_ptr<const RowPlan> plan;
  Value* values = nullptr;               // in plan order
  std::shared_ptr<const void> owner;     // of `values` when they are not the caller's (pulls; every push)
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
// that `owner` keeps alive (float32), or a bfloat16 copy the field owns.
BytesField RowsField(const float* rows, size_t values, wire::DType dtype, std::shared_ptr<const void> owner) {
  if (dtype == wire::DTYPE_BFLOAT16) {
    auto narrow = std::make_shared<std::string>(values * 2, '\0');
    ToBfloat16(rows, static_cast<int64_t>(values), reinterpret_cast<uint16_t*>(narrow->data()));
    return {5, *narrow, narrow};
  }
  return {5, {reinterpret_cast<const char*>(rows), values * sizeof(float)}, std::move(owner)};
}
// Names `table`'s part of `ids` ids in a request of several tables. The
// first part's table is also the request's `table`: a server from before
// RowsPart reads that alone, and then finds the sizes wrong instead of
// taking every table's rows as one's.
// With replication the part names its server (`primary` >= 0), so that the
// request means the same where it is redirected to a backup.
template <typename Request>
void AddRowsPart(Request& head, uint32_t table, size_t ids, int primary) {
  wire::RowsPart* part = head.add_parts();
  part->set_table(table);
  part->set_ids(ids);
  if (primary >= 0) part->set_primary(primary);
  if (head.parts_size() == 1) head.set_table(table);
}

// The rows of a PullRows answer from server `s` into the places `into`
// names, in order: read straight from the received slices when there is
// one place and float32, else through one buffer. INTERNAL when the
// answer does not hold exactly their values.
absl::Status ReadPulledRows(const grpc::ByteBuffer& answer, int s, const std::vector<PulledPlace>& into,
                            wire::DType dtype) {
  size_t values = 0;
  for (const PulledPlace& p : into) values += p.values;
  const size_t want = values * ValueBytes(dtype);
  const bool direct = into.size() == 1 && dtype != wire::DTYPE_BFLOAT16;
  std::string buffer;
  bool seen = false;
  wire::PullRowsResponse head;
  absl::Status st = ParseWithBytes(
      answer, {1},
      [&](int, size_t size) -> absl::StatusOr<char*> {
        if (seen) return absl::InternalError(absl::StrCat("server ", s, " answered a second field of rows"));
        if (size != want) {
          return absl::InternalError(absl::StrCat("server ", s, " answered ", size, " bytes of rows; want ", want));
        }
        seen = true;
        if (direct) return reinterpret_cast<char*>(into[0].out);
        buffer.resize(size);
        return buffer.data();
      },
      &head);
  if (!st.ok()) return st;
  if (!seen && want != 0) {
    return absl::InternalError(absl::StrCat("server ", s, " answered 0 bytes of rows; want ", want));
  }
  if (direct) return absl::OkStatus();
  const char* at = buffer.data();
  for (const PulledPlace& p : into) {
    if (dtype == wire::DTYPE_BFLOAT16) {
      FromBfloat16(at, static_cast<int64_t>(p.values), p.out);
    } else if (p.values > 0) {
      std::memcpy(p.out, at, p.values * sizeof(float));
    }
    at += p.values * ValueBytes(dtype);
  }
  return absl::OkStatus();
}


// One attempt of a PushRows request.
void SendRowsAttempt(RowsPushPart& part, std::shared_ptr<grpc::ByteBuffer> resp, Stub& stub, grpc::ClientContext* ctx,
                     uint64_t session, std::function<void(grpc::Status)> cb) {
  part.head.set_session_id(session);
  std::vector<BytesField> fields = part.ids;
  fields.insert(fields.end(), part.rows.begin(), part.rows.end());
  auto request = std::make_shared<grpc::ByteBuffer>(MessageWithBytes(part.head, fields));
  stub.raw->UnaryCall(ctx, kPushRowsMethod, grpc::StubOptions(), request.get(), resp.get(),
                      [request, resp, cb = std::move(cb)](grpc::Status st) { cb(std::move(st)); });
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

void GrpcPsClient::PushRowsManyAsync(int64_t step, std::vector<Rows<const float>> tables, Done done) {
  if (shut_down_) return done(absl::CancelledError("client is shut down"));
  const int servers = static_cast<int>(connections_.size());
  std::vector<PlannedRows<const float>> planned;
  for (const Rows<const float>& t : tables) {
    const absl::StatusOr<int> dim = TableDim(t.table);
    if (!dim.ok()) return done(dim.status());
    PlannedRows<const float> p{t.table, *dim, std::make_shared<const RowPlan>(PlanRows(t.ids, t.n, servers))};
    // The requests own the rows they send: gRPC may hold a request's slices
    // past the call's end (a write stuck behind a stalled peer), when the
    // caller's memory is no longer lent. Distinct ids in server order are
    // one copy of the gradients (bfloat16: the narrowed copy RowsField
    // makes); otherwise their sums.
    if (p.plan->identity && options_.wire_dtype == wire::DTYPE_BFLOAT16) {
      p.values = t.values;
    } else {
      auto owned = std::make_shared<const std::vector<float>>(
          p.plan->identity ? std::vector<float>(t.values, t.values + t.n * static_cast<size_t>(*dim))
                           : SumRows(*p.plan, t.values, t.n, *dim));
      p.values = owned->data();
      p.owner = std::move(owned);
    }
    planned.push_back(std::move(p));
  }
  std::vector<std::pair<int, std::shared_ptr<RowsPushPart>>> reqs;
  for (int s = 0; s < servers; ++s) {
    if (absl::Status st = PlanPushes(step, s, planned, reqs); !st.ok()) return done(st);
  }
  if (reqs.empty()) return done(absl::OkStatus());
  auto fanout = std::make_shared<Fanout>(static_cast<int>(reqs.size()), std::move(done));
  for (auto& [s, part] : reqs) {
    TransferPriority priority = PriorityOf(step, 0, s);
    // After the dense tensors.
    priority.order = static_cast<int64_t>(options_.layout.tensors.size() + part->head.parts(0).table());
    int64_t bytes = 0;
    for (const BytesField& f : part->ids) bytes += static_cast<int64_t>(f.bytes.size());
    for (const BytesField& f : part->rows) bytes += static_cast<int64_t>(f.bytes.size());
    push_queue_.Submit(priority, bytes,
                       [this, s = s, part = std::move(part), fanout](std::function<void()> finished) mutable {
                         SendRows(s, std::move(part), std::move(fanout), std::move(finished));
                       });
  }
}

absl::Status GrpcPsClient::PlanPushes(int64_t step, int s, const std::vector<PlannedRows<const float>>& planned,
                                      std::vector<std::pair<int, std::shared_ptr<RowsPushPart>>>& reqs) const {
  const wire::DType dtype = options_.wire_dtype;
  const bool sync = options_.job.mode == Mode::kSync;
  const int64_t room = std::max<int64_t>(1, options_.max_message_bytes - kMessageOverhead);
  std::shared_ptr<RowsPushPart> open;
  int64_t used = 0;
  const auto flush = [&] {
    if (open != nullptr) reqs.emplace_back(s, std::move(open));
    open = nullptr;
    used = 0;
  };
  // Every table goes to every server, with no ids where it has none there:
  // a sync step needs it, and in async and ssp a server with no dense keys
  // counts the workers' clocks by it.
  for (const PlannedRows<const float>& p : planned) {
    const size_t begin = p.plan->server_begin[s], count = p.plan->server_begin[s + 1] - begin;
    const size_t limit = RowsPerRequest(options_.max_message_bytes, p.dim, dtype);
    // A sync step takes one request per server per table; so does a push
    // with replicas, whose server drops a second request of the same step
    // as sent again after a failover.
    if (count > limit && (sync || failover_ != nullptr)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "push of ", count, " rows of table ", p.table, " to server ", s, " is over the message limit of ",
          options_.max_message_bytes, " bytes (", limit, " rows); ",
          sync ? "a sync step" : "with --replicas=2 a push", " takes one request per server per table: ",
          "use fewer ids a step or more servers"));
    }
    const int64_t per_row = 8 + static_cast<int64_t>(p.dim) * ValueBytes(dtype);
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += limit) {
      const size_t take = std::min(limit, count - off);
      if (open != nullptr && used + static_cast<int64_t>(take) * per_row > room) flush();
      if (open == nullptr) {
        open = std::make_shared<RowsPushPart>();
        open->head.set_step(step);
        open->head.set_dtype(dtype);
      }
      AddRowsPart(open->head, p.table, take, failover_ != nullptr ? s : -1);
      open->ids.push_back(
          {4, {reinterpret_cast<const char*>(p.plan->ids.data() + begin + off), take * sizeof(int64_t)}, p.plan});
      open->rows.push_back(RowsField(p.values + (begin + off) * p.dim, take * p.dim, dtype, p.owner));
      used += static_cast<int64_t>(take) * per_row;
      if (count == 0) break;
    }
  }
  flush();
  return absl::OkStatus();
}

void GrpcPsClient::SendRows(int s, std::shared_ptr<RowsPushPart> part, std::shared_ptr<Fanout> fanout,
                            std::function<void()> finished) {
  auto resp = std::make_shared<grpc::ByteBuffer>();
  CallSpec spec = TransferSpec("push of rows", options_.push_timeout, Lane::kPushes);
  // The server whose stub the last attempt took: the one that acknowledged it.
  auto answered_by = std::make_shared<std::atomic<int>>(s);
  connections_[s]->Call(
      spec,
      [part, resp, answered_by](Stub& stub, grpc::ClientContext* ctx, uint64_t session,
                                std::function<void(grpc::Status)> cb) {
        answered_by->store(stub.server_id);
        SendRowsAttempt(*part, resp, stub, ctx, session, std::move(cb));
      },
      [this, s, part, spec, answered_by, fanout, resp, finished = std::move(finished),
       timeline = failover_ != nullptr ? failover_->timeline() : 0](absl::Status st) {
        // With replication: kept for the backup (the request owns its rows),
        // as dense pushes are (client/failover.h).
        if (st.ok() && failover_ != nullptr) {
          failover_->Retain(
              s, answered_by->load(), part->head.step(), spec,
              [part](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
                SendRowsAttempt(*part, std::make_shared<grpc::ByteBuffer>(), stub, ctx, session, std::move(cb));
              },
              timeline, /*rows=*/true);
        }
        finished();
        fanout->Finish(st);
      });
}

void GrpcPsClient::PullRowsManyAsync(int64_t step, std::vector<Rows<float>> tables, Done done) {
  if (shut_down_) return done(absl::CancelledError("client is shut down"));
  const int servers = static_cast<int>(connections_.size());
  std::vector<PlannedRows<float>> planned;
  std::vector<std::pair<size_t, Rows<float>>> scatter;  // tables pulled in plan order: (index in planned, caller's)
  for (const Rows<float>& t : tables) {
    const absl::StatusOr<int> dim = TableDim(t.table);
    if (!dim.ok()) return done(dim.status());
    if (t.n == 0) continue;
    PlannedRows<float> p{t.table, *dim, std::make_shared<const RowPlan>(PlanRows(t.ids, t.n, servers))};
    // Distinct ids in server order are answered straight into the caller's
    // rows; otherwise into plan order, then scattered to every position.
    if (p.plan->identity) {
      p.values = t.values;
    } else {
      auto room = std::make_shared<std::vector<float>>(p.plan->ids.size() * *dim);
      p.values = room->data();
      p.owner = std::move(room);
      scatter.emplace_back(planned.size(), t);
    }
    planned.push_back(std::move(p));
  }
  std::vector<std::pair<int, std::shared_ptr<RowsPull>>> reqs;
  for (int s = 0; s < servers; ++s) PlanPulls(step, s, planned, reqs);
  if (reqs.empty()) return done(absl::OkStatus());
  auto keep = std::make_shared<std::vector<PlannedRows<float>>>(std::move(planned));
  auto fanout = std::make_shared<Fanout>(
      static_cast<int>(reqs.size()), [keep, scatter = std::move(scatter), done = std::move(done)](absl::Status st) {
        if (st.ok()) {
          for (const auto& [index, t] : scatter) {
            const PlannedRows<float>& p = (*keep)[index];
            ScatterRows(*p.plan, p.values, p.dim, t.values);
          }
        }
        done(st);
      });
  for (auto& [s, pull] : reqs) {
    TransferPriority priority = PriorityOf(step, 0, s);
    // Ahead of the dense tensors.
    priority.order = static_cast<int64_t>(pull->head.parts(0).table()) -
                     static_cast<int64_t>(options_.layout.tables.size());
    pull_queue_.Submit(priority, pull->bytes,
                       [this, s = s, pull, fanout, keep](std::function<void()> finished) {
                         auto req = std::make_shared<wire::PullRowsRequest>(pull->head);
                         SendRowsPull(s, std::move(req), pull->into, options_.wire_dtype, fanout, keep,
                                      std::move(finished));
                       });
  }
}

void GrpcPsClient::PlanPulls(int64_t step, int s, const std::vector<PlannedRows<float>>& planned,
                             std::vector<std::pair<int, std::shared_ptr<RowsPull>>>& reqs) const {
  const wire::DType dtype = options_.wire_dtype;
  const int64_t room = std::max<int64_t>(1, options_.max_message_bytes - kMessageOverhead);
  std::shared_ptr<RowsPull> open;
  const auto flush = [&] {
    if (open != nullptr) reqs.emplace_back(s, std::move(open));
    open = nullptr;
  };
  for (const PlannedRows<float>& p : planned) {
    const size_t begin = p.plan->server_begin[s], count = p.plan->server_begin[s + 1] - begin;
    const size_t limit = RowsPerRequest(options_.max_message_bytes, p.dim, dtype);
    const int64_t per_row = static_cast<int64_t>(p.dim) * ValueBytes(dtype);  // in the answer
    for (size_t off = 0; off < count; off += limit) {
      const size_t take = std::min(limit, count - off);
      // Both the request (8 bytes an id) and its answer must fit.
      if (open != nullptr && (open->bytes + static_cast<int64_t>(take) * per_row > room ||
                              static_cast<int64_t>(open->head.ids().size() + take * sizeof(int64_t)) > room)) {
        flush();
      }
      if (open == nullptr) {
        open = std::make_shared<RowsPull>();
        open->head.set_step(step);
        open->head.set_dtype(dtype);
      }
      AddRowsPart(open->head, p.table, take, failover_ != nullptr ? s : -1);
      open->head.mutable_ids()->append(reinterpret_cast<const char*>(p.plan->ids.data() + begin + off),
                                       take * sizeof(int64_t));
      open->into.push_back({p.values + (begin + off) * p.dim, take * p.dim});
      open->bytes += static_cast<int64_t>(take) * per_row;
    }
  }
  flush();
}

void GrpcPsClient::SendRowsPull(int s, std::shared_ptr<wire::PullRowsRequest> req, std::vector<PulledPlace> into,
                                wire::DType dtype, std::shared_ptr<Fanout> fanout, std::shared_ptr<const void> keep,
                                std::function<void()> finished) {
  auto resp = std::make_shared<grpc::ByteBuffer>();
  connections_[s]->Call(
      TransferSpec("pull of rows", options_.pull_timeout, Lane::kFetches),
      [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
        req->set_session_id(session);
        auto request = std::make_shared<grpc::ByteBuffer>(MessageBuffer(*req));
        stub.raw->UnaryCall(ctx, kPullRowsMethod, grpc::StubOptions(), request.get(), resp.get(),
                            [request, cb = std::move(cb)](grpc::Status st) { cb(std::move(st)); });
      },
      [fanout, resp, into = std::move(into), dtype, keep, s, finished = std::move(finished)](absl::Status st) {
        finished();
        if (st.ok()) st = ReadPulledRows(*resp, s, into, dtype);
        fanout->Finish(st);
      });
}

}  // namespace shardps
