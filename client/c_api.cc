// The C API (client/c_api.h) over PsClient. Statuses become return codes and
// the thread's last error here and nowhere else; no exception crosses into C.
#include "client/c_api.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/c_api_internal.h"
#include "client/client_config.h"
#include "client/ps_client.h"
#include "common/mutex_tuning.h"

namespace shardps {
namespace {

absl::StatusOr<Layout> LayoutFrom(int n, const char* const* names, const int* ndims, const int64_t* dims) {
  if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("a layout of ", n, " tensors"));
  if (names == nullptr || ndims == nullptr || dims == nullptr) return NullArgument("the layout");
  Layout layout;
  int64_t d = 0;
  for (int t = 0; t < n; ++t) {
    if (names[t] == nullptr) return NullArgument(absl::StrCat("tensor ", t, "'s name").c_str());
    if (ndims[t] < 0) return absl::InvalidArgumentError(absl::StrCat("tensor ", names[t], " has ", ndims[t], " dims"));
    TensorSpec spec{names[t], {}};
    for (int i = 0; i < ndims[t]; ++i, ++d) {
      if (dims[d] <= 0) return absl::InvalidArgumentError(absl::StrCat("tensor ", names[t], " has a dimension ", dims[d]));
      spec.dims.push_back(dims[d]);
    }
    layout.tensors.push_back(std::move(spec));
  }
  return layout;
}

absl::Status AddTables(int n, const ShardpsTable* tables, Layout& layout) {
  if (n < 0 || (n > 0 && tables == nullptr)) return NullArgument("the tables");
  for (int i = 0; i < n; ++i) {
    const ShardpsTable& t = tables[i];
    if (t.name == nullptr) return NullArgument(absl::StrCat("table ", i, "'s name").c_str());
    TableSpec spec;
    spec.name = t.name;
    spec.dim = t.dim;
    spec.vocab = t.vocab;
    spec.init_scale = t.init_scale;
    spec.lr = t.lr;
    spec.seed = t.seed;
    absl::StatusOr<RowOptimizerKind> kind = ParseRowOptimizer(t.optimizer == nullptr ? "" : t.optimizer);
    if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat("table '", t.name, "': ", kind.status().message()));
    spec.optimizer = *kind;
    if (absl::Status s = CheckTableSpec(spec); !s.ok()) return s;
    layout.tables.push_back(std::move(spec));
  }
  // The same checks as a server's (names, repeats), before anything connects.
  absl::StatusOr<Layout> checked = LayoutFromProto(LayoutToProto(layout));
  return checked.status();
}

template <typename Tensor, typename Value>
absl::StatusOr<std::vector<Tensor>> TensorsOf(const Client& c, int n, const int* tensors, Value* const* values) {
  if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("a transfer of ", n, " tensors"));
  if (tensors == nullptr || values == nullptr) return NullArgument("the tensors");
  std::vector<Tensor> out;
  for (int i = 0; i < n; ++i) {
    if (tensors[i] < 0 || tensors[i] >= static_cast<int>(c.layout.tensors.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor index ", tensors[i], " is not in the layout of ",
                                                     c.layout.tensors.size(), " tensors"));
    }
    if (values[i] == nullptr) return NullArgument(absl::StrCat("the values of tensor ", tensors[i]).c_str());
    out.push_back({static_cast<uint32_t>(tensors[i]), values[i]});
  }
  return out;
}


}  // namespace
}  // namespace shardps

using shardps::Call;
using shardps::Client;
using shardps::Guard;

const char* ShardpsLastError(void) { return shardps::last_error.c_str(); }
int ShardpsLastErrorCode(void) { return shardps::last_code; }

int ShardpsVersion(int* major, int* minor) {
  return Guard([&] {
    if (major == nullptr || minor == nullptr) return shardps::NullArgument("the version's outputs");
    *major = 1;
    *minor = 0;
    return absl::OkStatus();
  });
}

int ShardpsClientCreate(const char* config, int num_tensors, const char* const* names, const int* ndims,
                        const int64_t* dims, ShardpsClientHandle* out) {
  return ShardpsClientCreateWithTables(config, num_tensors, names, ndims, dims, 0, nullptr, out);
}

int ShardpsClientCreateWithTables(const char* config, int num_tensors, const char* const* names, const int* ndims,
                                  const int64_t* dims, int num_tables, const ShardpsTable* tables,
                                  ShardpsClientHandle* out) {
  shardps::SkipMutexDeadlockDetection();  // a client's process is a worker: common/mutex_tuning.h
  return Guard([&]() -> absl::Status {
    if (config == nullptr || out == nullptr) return shardps::NullArgument("the config or the output handle");
    absl::StatusOr<shardps::ClientOptions> options = shardps::ClientOptionsFromText(config);
    if (!options.ok()) return options.status();
    absl::StatusOr<shardps::Layout> layout = shardps::LayoutFrom(num_tensors, names, ndims, dims);
    if (!layout.ok()) return layout.status();
    absl::Status tables_ok = shardps::AddTables(num_tables, tables, *layout);
    if (!tables_ok.ok()) return tables_ok;
    auto c = std::make_unique<Client>();
    c->layout = *layout;
    for (size_t t = 0; t < c->layout.tensors.size(); ++t) {
      if (!c->index.emplace(c->layout.tensors[t].name, static_cast<int>(t)).second) {
        return absl::InvalidArgumentError(absl::StrCat("the layout names tensor '", c->layout.tensors[t].name, "' twice"));
      }
    }
    options->layout = c->layout;
    absl::StatusOr<std::unique_ptr<shardps::PsClient>> client = shardps::PsClient::Connect(*options);
    if (!client.ok()) return client.status();
    c->client = *std::move(client);
    *out = c.release();
    return absl::OkStatus();
  });
}

int ShardpsClientFree(ShardpsClientHandle client) {
  return Guard([&] {
    delete static_cast<Client*>(client);  // the client shuts down in its destructor
    return absl::OkStatus();
  });
}

int ShardpsTensorIndex(ShardpsClientHandle client, const char* name, int* index) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (name == nullptr || index == nullptr) return shardps::NullArgument("the name or the output");
    auto it = (*c)->index.find(name);
    if (it == (*c)->index.end()) return absl::NotFoundError(absl::StrCat("no tensor named '", name, "' in the layout"));
    *index = it->second;
    return absl::OkStatus();
  });
}

int ShardpsTensorSize(ShardpsClientHandle client, int index, int64_t* elements) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (elements == nullptr) return shardps::NullArgument("the output");
    if (index < 0 || index >= static_cast<int>((*c)->layout.tensors.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor index ", index, " is not in the layout"));
    }
    *elements = (*c)->layout.tensors[index].NumElements();
    return absl::OkStatus();
  });
}

int ShardpsClientRegister(ShardpsClientHandle client, int64_t* step) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (step == nullptr) return shardps::NullArgument("the output step");
    absl::StatusOr<int64_t> s = (*c)->client->Register();
    if (!s.ok()) return s.status();
    *step = *s;
    return absl::OkStatus();
  });
}

int ShardpsClientInit(ShardpsClientHandle client, const float* const* values, int* applied) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (values == nullptr) return shardps::NullArgument("the initial values");
    std::vector<std::vector<float>> weights;
    for (size_t t = 0; t < (*c)->layout.tensors.size(); ++t) {
      if (values[t] == nullptr) return shardps::NullArgument(absl::StrCat("tensor ", t, "'s initial values").c_str());
      weights.emplace_back(values[t], values[t] + (*c)->layout.tensors[t].NumElements());
    }
    bool done = false;
    if (absl::Status s = (*c)->client->Init(weights, &done); !s.ok()) return s;
    if (applied != nullptr) *applied = done ? 1 : 0;
    return absl::OkStatus();
  });
}

int ShardpsPush(ShardpsClientHandle client, int64_t step, int n, const int* tensors, const float* const* values) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    auto ins = shardps::TensorsOf<shardps::TensorIn>(**c, n, tensors, values);
    if (!ins.ok()) return ins.status();
    return (*c)->client->Push(step, *std::move(ins));
  });
}

int ShardpsPull(ShardpsClientHandle client, int64_t step, int n, const int* tensors, float* const* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    auto outs = shardps::TensorsOf<shardps::TensorOut>(**c, n, tensors, out);
    if (!outs.ok()) return outs.status();
    return (*c)->client->Pull(step, *std::move(outs));
  });
}

int ShardpsPushAsync(ShardpsClientHandle client, int64_t step, int n, const int* tensors, const float* const* values,
                     ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    auto ins = shardps::TensorsOf<shardps::TensorIn>(**c, n, tensors, values);
    if (!ins.ok()) return ins.status();
    auto* pending = new Call();
    (*c)->client->PushAsync(step, *std::move(ins), pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}

int ShardpsPullAsync(ShardpsClientHandle client, int64_t step, int n, const int* tensors, float* const* out,
                     ShardpsCallHandle* call) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (call == nullptr) return shardps::NullArgument("the output call");
    auto outs = shardps::TensorsOf<shardps::TensorOut>(**c, n, tensors, out);
    if (!outs.ok()) return outs.status();
    auto* pending = new Call();
    (*c)->client->PullAsync(step, *std::move(outs), pending->Callback());
    *call = pending;
    return absl::OkStatus();
  });
}

int ShardpsPushThenPull(ShardpsClientHandle client, int64_t step, int n, const int* tensors, const float* const* grads,
                        float* const* out, ShardpsCallHandle* pushed, ShardpsCallHandle* pulled) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    if (pushed == nullptr || pulled == nullptr) return shardps::NullArgument("the output calls");
    auto ins = shardps::TensorsOf<shardps::TensorIn>(**c, n, tensors, grads);
    if (!ins.ok()) return ins.status();
    auto outs = shardps::TensorsOf<shardps::TensorOut>(**c, n, tensors, out);
    if (!outs.ok()) return outs.status();
    auto* push = new Call();
    auto* pull = new Call();
    (*c)->client->PushThenPull(step, *std::move(ins), *std::move(outs), push->Callback(), pull->Callback());
    *pushed = push;
    *pulled = pull;
    return absl::OkStatus();
  });
}

int ShardpsCallWait(ShardpsCallHandle call, double timeout_seconds, int* done) {
  return Guard([&]() -> absl::Status {
    if (call == nullptr || done == nullptr) return shardps::NullArgument("the call or the output");
    auto* c = static_cast<Call*>(call);
    const bool finished = timeout_seconds < 0 ? (c->done.WaitForNotification(), true)
                                              : c->done.WaitForNotificationWithTimeout(absl::Seconds(timeout_seconds));
    *done = finished ? 1 : 0;
    return finished ? c->status : absl::OkStatus();
  });
}

int ShardpsCallFree(ShardpsCallHandle call) {
  return Guard([&] {
    if (call == nullptr) return absl::OkStatus();
    auto* c = static_cast<Call*>(call);
    shardps::Wait(*c).IgnoreError();  // its buffers are borrowed until it completes
    delete c;
    return absl::OkStatus();
  });
}

int ShardpsClientStats(ShardpsClientHandle client, int64_t* retries, int64_t* registrations, int64_t* rewinds) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<Client*> c = shardps::ClientOf(client);
    if (!c.ok()) return c.status();
    const shardps::ClientStats s = (*c)->client->Stats();
    if (retries != nullptr) *retries = s.retries;
    if (registrations != nullptr) *registrations = s.registrations;
    if (rewinds != nullptr) *rewinds = s.rewinds;
    return absl::OkStatus();
  });
}
