// The C API's row calls (client/c_api.h: ShardpsPushRows, ShardpsPullRows
// and their asynchronous forms) over PsClient's.
#include "client/c_api.h"
#include "client/c_api_internal.h"

namespace shardps {
namespace {

// The arguments every row call checks the same way.
absl::Status CheckRows(const Client& c, int table, int64_t n, const int64_t* ids, const void* values) {
  if (table < 0 || table >= static_cast<int>(c.layout.tables.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("table index ", table, " is not in the layout of ", c.layout.tables.size(), " tables"));
  }
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("a transfer of ", n, " rows"));
  if (n > 0 && (ids == nullptr || values == nullptr)) return NullArgument("the ids or the rows");
  return absl::OkStatus();
}

// The `count` tables of a call of several, once each has passed CheckRows.
template <typename Value>
absl::StatusOr<std::vector<PsClient::Rows<Value>>> ManyRows(const Client& c, int count, const int* tables,
                                                            const int64_t* ns, const int64_t* const* ids,
                                                            Value* const* values) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("a call of ", count, " transfers of rows"));
  if (count > 0 && (tables == nullptr || ns == nullptr || ids == nullptr || values == nullptr)) {
    return NullArgument("the tables, counts, ids or rows");
  }
  std::vector<PsClient::Rows<Value>> out;
  for (int i = 0; i < count; ++i) {
    if (absl::Status s = CheckRows(c, tables[i], ns[i], ids[i], values[i]); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("transfer ", i, " of ", count, ": ", s.message()));
    }
    out.push_back({static_cast<uint32_t>(tables[i]), ids[i], static_cast<size_t>(ns[i]), values[i]});
  }
  return out;
}

}  // namespace
}  // namespace shardps

using shardps::Call;
using shardps::Client;
using shardps::Guard;

int ShardpsPushRowsAsync(ShardpsClientHandle client, int64_t step, int table, int64_t n, const int64_t* ids,
                         const float* grads, ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    if (absl::Status s = shardps::CheckRows(**c, table, n, ids, grads); !s.ok()) return s;
    auto* pending = new Call();
    (*c)->client->PushRowsAsync(step, static_cast<uint32_t>(table), ids, static_cast<size_t>(n), grads,
                                pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}

int ShardpsPullRowsAsync(ShardpsClientHandle client, int64_t step, int table, int64_t n, const int64_t* ids,
                         float* rows, ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    if (absl::Status s = shardps::CheckRows(**c, table, n, ids, rows); !s.ok()) return s;
    auto* pending = new Call();
    (*c)->client->PullRowsAsync(step, static_cast<uint32_t>(table), ids, static_cast<size_t>(n), rows,
                                pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}

int ShardpsPushRows(ShardpsClientHandle client, int64_t step, int table, int64_t n, const int64_t* ids,
                    const float* grads) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (absl::Status s = shardps::CheckRows(**c, table, n, ids, grads); !s.ok()) return s;
    return (*c)->client->PushRows(step, static_cast<uint32_t>(table), ids, static_cast<size_t>(n), grads);
  });
}

int ShardpsPullRows(ShardpsClientHandle client, int64_t step, int table, int64_t n, const int64_t* ids,
                    float* rows) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (absl::Status s = shardps::CheckRows(**c, table, n, ids, rows); !s.ok()) return s;
    return (*c)->client->PullRows(step, static_cast<uint32_t>(table), ids, static_cast<size_t>(n), rows);
  });
}

int ShardpsPushRowsManyAsync(ShardpsClientHandle client, int64_t step, int count, const int* tables, const int64_t* ns,
                             const int64_t* const* ids, const float* const* grads, ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    auto rows = shardps::ManyRows(**c, count, tables, ns, ids, grads);
    if (!rows.ok()) return rows.status();
    auto* pending = new Call();
    (*c)->client->PushRowsManyAsync(step, *std::move(rows), pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}

int ShardpsPullRowsManyAsync(ShardpsClientHandle client, int64_t step, int count, const int* tables, const int64_t* ns,
                             const int64_t* const* ids, float* const* rows, ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    auto many = shardps::ManyRows(**c, count, tables, ns, ids, rows);
    if (!many.ok()) return many.status();
    auto* pending = new Call();
    (*c)->client->PullRowsManyAsync(step, *std::move(many), pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}
