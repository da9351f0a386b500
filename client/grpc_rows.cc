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
#include "common/wire_dtype.h"

namespace shardps {

namespace {
// Room left in a message for everything but the ids and rows.
constexpr int64_t kMessageOverhead = 64 << 10;

size_t RowsPerRequest(int64_t max_message_bytes, int dim, wire::DType dtype) {
  const int64_t per_row = 8 + static_cast<int64_t>(dim) * ValueBytes(dtype);
  return static_cast<size_t>(std::max<int64_t>(1, (max_message_bytes - kMessageOverhead) / per_row));
}

void EncodeRows(const float* rows, size_t values, wire::DType dtype, std::string* out) {
  if (dtype == wire::DTYPE_BFLOAT16) {
    out->resize(values * 2);
    ToBfloat16(rows, static_cast<int64_t>(values), reinterpret_cast<uint16_t*>(out->data()));
  } else {
    out->assign(reinterpret_cast<const char*>(rows), values * sizeof(float));
  }
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
  const RowPlan plan = PlanRows(ids, n, servers);
  const std::vector<float> sums = SumRows(plan, grads, n, *dim);
  const wire::DType dtype = options_.wire_dtype;
  const size_t limit = RowsPerRequest(options_.max_message_bytes, *dim, dtype);
  const bool sync = options_.job.mode == Mode::kSync;
  std::vector<std::pair<int, std::shared_ptr<wire::PushRowsRequest>>> reqs;
  for (int s = 0; s < servers; ++s) {
    // Every server hears from every worker each step, with no ids where it
    // has none: a sync step needs it, and in async and ssp a server with no
    // dense keys counts the workers' clocks by it.
    const size_t begin = plan.server_begin[s], count = plan.server_begin[s + 1] - begin;
    if (count > limit && sync) {
      return done(absl::ResourceExhaustedError(absl::StrCat(
          "push of ", count, " rows of table ", table, " to server ", s, " is over the message limit of ",
          options_.max_message_bytes, " bytes (", limit,
          " rows); a sync step takes one request per server per table: use fewer ids a step or more servers")));
    }
    for (size_t off = 0; off < count || (count == 0 && off == 0); off += limit) {
      const size_t take = std::min(limit, count - off);
      auto req = std::make_shared<wire::PushRowsRequest>();
      req->set_step(step);
      req->set_table(table);
      req->set_dtype(dtype);
      req->set_ids(reinterpret_cast<const char*>(plan.ids.data() + begin + off), take * sizeof(int64_t));
      EncodeRows(sums.data() + (begin + off) * *dim, take * *dim, dtype, req->mutable_rows());
      reqs.emplace_back(s, std::move(req));
      if (count == 0) break;
    }
  }
  if (reqs.empty()) return done(absl::OkStatus());
  auto fanout = std::make_shared<Fanout>(static_cast<int>(reqs.size()), std::move(done));
  for (auto& [s, req] : reqs) {
    TransferPriority priority = PriorityOf(step, 0, s);
    priority.order = static_cast<int64_t>(options_.layout.tensors.size() + table);  // after the dense tensors
    const int64_t bytes = static_cast<int64_t>(req->ids().size() + req->rows().size());
    push_queue_.Submit(priority, bytes,
                       [this, s = s, req = std::move(req), fanout](std::function<void()> finished) mutable {
                         SendRows(s, std::move(req), std::move(fanout), std::move(finished));
                       });
  }
}

void GrpcPsClient::SendRows(int s, std::shared_ptr<wire::PushRowsRequest> req, std::shared_ptr<Fanout> fanout,
                            std::function<void()> finished) {
  auto resp = std::make_shared<wire::PushRowsResponse>();
  CallSpec spec = TransferSpec("push of rows", options_.push_timeout);
  spec.lane = Lane::kPushes;
  connections_[s]->Call(
      spec,
      [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
        req->set_session_id(session);
        stub.proto->async()->PushRows(ctx, req.get(), resp.get(), std::move(cb));
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
  auto pulled = std::make_shared<std::vector<float>>(plan->ids.size() * *dim);
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
        if (st.ok()) ScatterRows(*plan, pulled->data(), dim, rows);
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
    float* out = pulled->data() + p.begin * *dim;
    TransferPriority priority = PriorityOf(step, 0, p.server);
    priority.order = order;  // ahead of the dense tensors
    pull_queue_.Submit(priority, static_cast<int64_t>(values * ValueBytes(dtype)),
                       [this, req, out, values, dtype, fanout, pulled, s = p.server](std::function<void()> finished) {
                         SendRowsPull(s, req, out, values, dtype, fanout, pulled, std::move(finished));
                       });
  }
}

void GrpcPsClient::SendRowsPull(int s, std::shared_ptr<wire::PullRowsRequest> req, float* out, size_t values,
                                wire::DType dtype, std::shared_ptr<Fanout> fanout,
                                std::shared_ptr<std::vector<float>> pulled, std::function<void()> finished) {
  auto resp = std::make_shared<wire::PullRowsResponse>();
  connections_[s]->Call(
      TransferSpec("pull of rows", options_.pull_timeout),
      [req, resp](Stub& stub, grpc::ClientContext* ctx, uint64_t session, std::function<void(grpc::Status)> cb) {
        req->set_session_id(session);
        stub.proto->async()->PullRows(ctx, req.get(), resp.get(), std::move(cb));
      },
      [fanout, resp, out, values, dtype, pulled, s, finished = std::move(finished)](absl::Status st) {
        finished();
        if (st.ok() && resp->rows().size() != values * ValueBytes(dtype)) {
          st = absl::InternalError(absl::StrCat("server ", s, " answered ", resp->rows().size(),
                                                " bytes of rows; want ", values * ValueBytes(dtype)));
        }
        if (st.ok() && dtype == wire::DTYPE_BFLOAT16) {
          FromBfloat16(resp->rows().data(), static_cast<int64_t>(values), out);
        } else if (st.ok()) {
          std::memcpy(out, resp->rows().data(), values * sizeof(float));
        }
        fanout->Finish(st);
      });
}

}  // namespace shardps
