#include "tests/fuzz_job.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_view.h"
#include "common/layout.h"
#include "common/table_spec.h"

namespace shardps::testing {
namespace {

using Message = google::protobuf::Message;

constexpr int64_t kMaxItemBytes = 4096;
// No server is taken for failed for silence (the test cluster's backups
// wait half a second, workers 3 s): a slow moment of a loaded machine must
// not move keys to the other copy between a request and the pull that
// checks it. Failover has its own tests; here only a fuzzed view of the
// servers moves keys.
constexpr absl::Duration kNoFailover = absl::Minutes(5);
// How long the backups may take to acknowledge what was applied: with two
// copies an async pull reads the version the backup has acknowledged
// (DESIGN.md, "Replication"), so a pull right after a push may still read
// the one before it. (A fuzz beside a build once failed so: a pull after a
// real worker's push read the weights from before it.)
constexpr absl::Duration kSettle = absl::Seconds(20);
constexpr uint32_t kTable = 0;
const std::vector<int64_t> kSnapshotIds = {0, 1, 2, 3, 7};

int64_t Held(int64_t bytes) { return std::clamp<int64_t>(bytes, 0, kMaxItemBytes); }

std::string ZeroBytes(int64_t bytes) { return std::string(static_cast<size_t>(bytes), '\0'); }

// The first of ids 0, 1, 2, ... that server s holds.
int64_t RowOf(int s) {
  int64_t id = 0;
  while (RowServer(id, 2) != s) ++id;
  return id;
}

// The first index where `after` equals `before`, or -1.
int Unmoved(const std::vector<float>& before, const std::vector<float>& after) {
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i] == before[i]) return static_cast<int>(i);
  }
  return -1;
}

template <typename T>
std::unique_ptr<Message> Own(T message) {
  return std::make_unique<T>(std::move(message));
}

}  // namespace

size_t DeclaredPayloadBytes(const Message& header) {
  int64_t bytes = 0;
  if (const auto* push = dynamic_cast<const wire::PushRequest*>(&header)) {
    for (const wire::Chunk& c : push->chunks()) bytes += Held(c.raw_bytes());
  } else if (const auto* replicate = dynamic_cast<const wire::ReplicateRequest*>(&header)) {
    for (const wire::ReplicaKey& k : replicate->keys()) bytes += Held(k.raw_values()) * 4 * (1 + Held(k.raw_slots()));
    for (const wire::ReplicaRows& r : replicate->rows()) bytes += Held(r.count()) * (8 + 4 * Held(r.row_floats()));
  }
  return static_cast<size_t>(std::min<int64_t>(bytes, 16 * kMaxItemBytes));
}

Layout FuzzJob::JobLayout() {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 2;
  t.init_scale = 0.5f;
  t.optimizer = RowOptimizerKind::kAdagrad;  // a slot per element: replicas carry it
  t.lr = 0.5f;
  l.tables.push_back(t);
  return l;
}

ServerOptions FuzzJob::Options(Mode mode) {
  ServerOptions o = SyncOptions(2, 2);
  o.job.mode = mode;
  o.job.replicas = 2;
  return o;
}

FuzzJob::FuzzJob(Mode mode)
    : options_(Options(mode)),
      cluster_(options_, HostOptions(), /*clock=*/nullptr, kNoFailover),
      map_(*KeyMap::Build(JobLayout(), 2, kSmallPartitionBytes)) {
  worker_ = Worker(0);
  REQUIRE(worker_->Init(Zeros(JobLayout())).ok());
  for (int s = 0; s < 2; ++s) {
    stubs_.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateChannel(cluster_.Addresses()[s], grpc::InsecureChannelCredentials())));
    sessions_[s] = RegisterRaw(s);
    incarnations_[s] = cluster_.core(s)->incarnation();
  }
}

FuzzJob::~FuzzJob() {
  if (worker_ != nullptr) worker_->Shutdown();
}

std::unique_ptr<PsClient> FuzzJob::Worker(int rank) const {
  ClientOptions c = cluster_.ClientFor(rank, JobLayout());
  c.failover_timeout = kNoFailover;
  return cluster_.Worker(c);
}

wire::JobView FuzzJob::View() const {
  JobView v = options_.job;
  v.layout_hash = LayoutHash(JobLayout());
  return JobViewToProto(v);
}

std::unique_ptr<Message> FuzzJob::GoodRegister(int) const {
  wire::RegisterRequest req;
  req.set_rank(1);
  *req.mutable_view() = View();
  for (const std::string& address : cluster_.Addresses()) req.add_servers(address);
  return Own(req);
}

uint64_t FuzzJob::RegisterRaw(int s) {
  const auto req = GoodRegister(s);
  wire::RegisterResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status status =
      cluster_.RawStub(s)->Register(&ctx, static_cast<const wire::RegisterRequest&>(*req), &resp);
  REQUIRE(status.ok());
  return resp.session_id();
}

std::unique_ptr<Message> FuzzJob::GoodInit(int s) const {
  wire::InitRequest req;
  req.set_session_id(sessions_[s]);
  *req.mutable_layout() = LayoutToProto(JobLayout());
  for (const ChunkInfo& c : map_.chunks()) {  // with two copies each server holds every key
    wire::Chunk* chunk = req.add_chunks();
    chunk->mutable_key()->set_tensor(c.key.tensor);
    chunk->mutable_key()->set_chunk(c.key.chunk);
    chunk->set_dtype(wire::DTYPE_FLOAT32);
    chunk->set_data(ZeroBytes(4 * c.length));
  }
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodPush(int s, bool framed) const {
  wire::PushRequest req;
  req.set_session_id(sessions_[s]);
  req.set_step(0);
  for (const ChunkInfo& c : map_.ChunksOfServer(s)) {
    wire::Chunk* chunk = req.add_chunks();
    chunk->mutable_key()->set_tensor(c.key.tensor);
    chunk->mutable_key()->set_chunk(c.key.chunk);
    chunk->set_dtype(wire::DTYPE_FLOAT32);
    if (framed) {
      chunk->set_raw_bytes(4 * c.length);
    } else {
      chunk->set_data(ZeroBytes(4 * c.length));
    }
    if (req.chunks_size() == 2) break;
  }
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodPull(int s) const {
  wire::PullRequest req;
  req.set_session_id(sessions_[s]);
  req.set_step(0);
  for (const ChunkInfo& c : map_.ChunksOfServer(s)) {
    wire::Key* key = req.add_keys();
    key->set_tensor(c.key.tensor);
    key->set_chunk(c.key.chunk);
  }
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodPushRows(int s) const {
  wire::PushRowsRequest req;
  req.set_session_id(sessions_[s]);
  req.set_step(0);
  req.set_table(kTable);
  const std::vector<int64_t> ids = {RowOf(s)};
  req.set_ids(std::string(reinterpret_cast<const char*>(ids.data()), 8));
  req.set_rows(ZeroBytes(8));
  req.set_dtype(wire::DTYPE_FLOAT32);
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodPullRows(int s) const {
  wire::PullRowsRequest req;
  req.set_session_id(sessions_[s]);
  req.set_step(0);
  req.set_table(kTable);
  const std::vector<int64_t> ids = {RowOf(s), RowOf(s)};
  req.set_ids(std::string(reinterpret_cast<const char*>(ids.data()), 16));
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodHeartbeat(int s) const {
  wire::HeartbeatRequest req;
  req.set_session_id(sessions_[s]);
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodAdmin(int) const {
  wire::AdminRequest req;
  req.set_action(wire::ADMIN_STATUS);
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodRewind(int s) const {
  wire::RewindRequest req;
  req.set_step(0);
  req.set_timeline(1);
  wire::RestartedServer* r = req.add_restarted();
  r->set_server_id(s);
  r->set_incarnation(incarnations_[s]);
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodReplicate(int s, bool framed) const {
  const int peer = 1 - s;  // two servers: each backs the other up
  wire::ReplicateRequest req;
  req.set_from_server(peer);
  const ChunkInfo c = map_.ChunksOfServer(peer).front();
  wire::ReplicaKey* k = req.add_keys();
  k->mutable_key()->set_tensor(c.key.tensor);
  k->mutable_key()->set_chunk(c.key.chunk);
  k->set_version(1);
  k->add_last_pushed_step(0);
  k->add_last_pushed_step(0);
  if (framed) {
    k->set_raw_values(c.length);
    wire::ReplicaRows* rows = req.add_rows();
    rows->set_primary(peer);
    rows->set_table(kTable);
    rows->set_version(1);
    rows->set_count(1);
    rows->set_row_floats(4);  // dim 2, then Adagrad's 2 accumulators
    rows->add_last_pushed_step(0);
    rows->add_last_pushed_step(0);
  } else {
    k->set_weights(ZeroBytes(4 * c.length));
  }
  return Own(req);
}

std::unique_ptr<Message> FuzzJob::GoodJoin(int s) const {
  wire::JoinRequest req;
  req.set_server_id(1 - s);
  return Own(req);
}

void FuzzJob::AvoidStop(Message* request) {
  if (auto* admin = dynamic_cast<wire::AdminRequest*>(request); admin != nullptr && admin->action() == wire::ADMIN_STOP) {
    admin->set_action(wire::ADMIN_STATUS);
  }
}

std::string FuzzJob::FuzzedView(ProtoMutator& mutator) {
  static const std::vector<std::string> kViews = {"1", "0,1", "2", "0,2", "3", "1,1", "4,3", "0,0", ""};
  std::string view = kViews[mutator.Uniform(0, static_cast<int64_t>(kViews.size()) - 1)];
  if (mutator.OneIn(3)) view = ProtoMutator::Printable(mutator.MutateBytes(std::move(view)));  // as metadata is
  return view;
}

grpc::Status FuzzJob::Call(int s, const std::string& method, const grpc::ByteBuffer& request, absl::Duration timeout,
                           const std::string& view) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!view.empty()) ctx.AddMetadata(kServerViewKey, view);
  grpc::ByteBuffer response;
  return GenericUnaryCall(*stubs_[s], &ctx, method, request, &response);
}

std::vector<float> FuzzJob::PullAll(PsClient& worker, int64_t step, absl::Status* status) {
  std::vector<std::vector<float>> w = Zeros(JobLayout());
  std::vector<TensorOut> out;
  for (size_t t = 0; t < w.size(); ++t) out.push_back({static_cast<uint32_t>(t), w[t].data()});
  *status = worker.Pull(step, out);
  std::vector<float> all;
  for (const auto& t : w) all.insert(all.end(), t.begin(), t.end());
  std::vector<float> rows(kSnapshotIds.size() * 2);
  if (status->ok()) *status = worker.PullRows(step, kTable, kSnapshotIds.data(), kSnapshotIds.size(), rows.data());
  all.insert(all.end(), rows.begin(), rows.end());
  return all;
}

bool FuzzJob::Settled() {
  for (const absl::Time deadline = absl::Now() + kSettle; absl::Now() < deadline;) {
    if (cluster_.core(0)->Stats().keys_awaiting_copy == 0 && cluster_.core(1)->Stats().keys_awaiting_copy == 0) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(1));  // polled: the acknowledgement comes over real gRPC
  }
  return false;
}

std::vector<float> FuzzJob::Snapshot() {
  INFO("the backups acknowledge every applied update within " << absl::FormatDuration(kSettle));
  REQUIRE(Settled());
  absl::Status status;
  std::vector<float> all = PullAll(*worker_, 0, &status);
  if (!status.ok()) {  // a fuzzed registration as rank 0 replaced its session
    worker_->Shutdown();
    worker_ = Worker(0);
    all = PullAll(*worker_, 0, &status);
  }
  INFO("worker 0's pull: " << status.message());
  REQUIRE(status.ok());
  return all;
}

void FuzzJob::RenewSessionIfLost() {
  for (int s = 0; s < 2; ++s) {
    wire::HeartbeatRequest req;
    req.set_session_id(sessions_[s]);
    wire::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    if (cluster_.RawStub(s)->Heartbeat(&ctx, req, &resp).error_code() == grpc::StatusCode::ABORTED) {
      sessions_[s] = RegisterRaw(s);
    }
  }
}

bool FuzzJob::StillServing() const { return cluster_.AdminStatus(0).has_value() && cluster_.AdminStatus(1).has_value(); }

absl::Status FuzzJob::WorkerTrains() {
  const std::vector<float> before = Snapshot();
  std::unique_ptr<PsClient> second = Worker(1);
  // Both workers push one step of ones (weights and rows) at the step the job is at, then pull the next.
  const absl::StatusOr<int64_t> step = second->Register();
  if (!step.ok()) return step.status();
  std::vector<std::vector<float>> ones = Zeros(JobLayout());
  std::vector<TensorIn> grads;
  for (size_t t = 0; t < ones.size(); ++t) {
    std::fill(ones[t].begin(), ones[t].end(), 1.0f);
    grads.push_back({static_cast<uint32_t>(t), ones[t].data()});
  }
  const std::vector<float> row_grads(kSnapshotIds.size() * 2, 1.0f);
  for (PsClient* w : {worker_.get(), second.get()}) {  // sync: every worker pushes every table each step
    if (absl::Status s = w->Push(*step, grads); !s.ok()) return s;
    if (absl::Status s = w->PushRows(*step, kTable, kSnapshotIds.data(), kSnapshotIds.size(), row_grads.data());
        !s.ok()) {
      return s;
    }
  }
  if (!Settled()) return absl::DeadlineExceededError("the backups did not acknowledge the step");
  absl::Status status;
  const std::vector<float> after = PullAll(*worker_, *step + 1, &status);
  second->Shutdown();
  if (!status.ok()) return status;
  if (const int i = Unmoved(before, after); i >= 0) {
    const std::optional<wire::ServerStatus> s0 = cluster_.AdminStatus(0), s1 = cluster_.AdminStatus(1);
    return absl::InternalError(absl::StrCat(
        "value ", i, " of ", after.size(), " (weights, then rows) did not move from ", before[i], " after step ",
        *step, "; before [", absl::StrJoin(before, ","), "], after [",
        absl::StrJoin(after, ","), "]; servers ", s0 ? s0->ShortDebugString() : "(no status)", " / ",
        s1 ? s1->ShortDebugString() : "(no status)"));
  }
  return absl::OkStatus();
}

}  // namespace shardps::testing
