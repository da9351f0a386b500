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
