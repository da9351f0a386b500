// Sparse tables end to end over real gRPC on loopback: PsClient's row calls
// against in-process servers, with exact expected rows (SGD, lr 1, rows
// starting at zero), and the bad inputs a server refuses while it keeps
// serving.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "client/pending_call.h"
#include "tests/expect_status.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

Layout TableLayout(int64_t vocab = 0) {
  Layout l = SmallLayout();
  TableSpec t;
  t.name = "emb";
  t.dim = 2;
  t.vocab = vocab;
  t.init_scale = 0;
  t.optimizer = RowOptimizerKind::kSgd;
  t.lr = 1.0f;
  l.tables.push_back(t);
  return l;
}

ServerOptions Options(Mode mode) {
  ServerOptions o = SyncOptions(2, 2);
  o.job.mode = mode;
  return o;
}

struct Job {
  explicit Job(Mode mode) : cluster(Options(mode)) {
    for (int r = 0; r < 2; ++r) workers.push_back(cluster.Worker(r, TableLayout()));
    REQUIRE(workers[0]->Init(Zeros(TableLayout())).ok());
  }
  TestCluster cluster;
  std::vector<std::unique_ptr<PsClient>> workers;
};

TEST_CASE("sparse sync over gRPC: repeated ids summed, every server's step completes, rows exact", "[sparse]") {
  Job job(Mode::kSync);
  // Worker 0 names id 1 twice: its gradients are summed before they leave.
  const std::vector<int64_t> ids0 = {1, 2, 1}, ids1 = {2, 1000};
  const std::vector<float> g0 = {1, 1, 2, 2, 3, 3}, g1 = {4, 4, 6, 6};
  PendingCall p0, p1;
  job.workers[0]->PushRowsAsync(0, 0, ids0.data(), ids0.size(), g0.data(), p0.Callback());
  job.workers[1]->PushRowsAsync(0, 0, ids1.data(), ids1.size(), g1.data(), p1.Callback());
  p0.done.WaitForNotification();
  p1.done.WaitForNotification();
  REQUIRE(p0.status.ok());
  REQUIRE(p1.status.ok());
  const std::vector<int64_t> want = {1, 2, 1000, 1, 77};
  std::vector<float> rows(want.size() * 2, -99);
  REQUIRE(job.workers[1]->PullRows(1, 0, want.data(), want.size(), rows.data()).ok());
  // Sums over the workers divided by the 2 pushes: id 1 (1+3)/2, id 2 (2+4)/2, id 1000 6/2.
  CHECK(rows == std::vector<float>{-2, -2, -3, -3, -3, -3, -2, -2, 0, 0});
  int64_t pushes = 0;
  for (int s = 0; s < 2; ++s) {
    const ServerStats st = job.cluster.core(s)->Stats();
    REQUIRE(st.tables.size() == 1);
    CHECK(st.tables[0].version == 1);  // both servers completed the step
    pushes += st.tables[0].pushes;
  }
  CHECK(pushes == 4);  // every worker pushed to every server, with no ids where it had none
}

TEST_CASE("sparse async over gRPC: each push applies at once, divided by the workers", "[sparse]") {
  Job job(Mode::kAsync);
  const std::vector<int64_t> ids = {5, 5};
  const std::vector<float> g = {2, 2, 4, 4};
  REQUIRE(job.workers[0]->PushRows(0, 0, ids.data(), ids.size(), g.data()).ok());
  std::vector<float> row(2);
  REQUIRE(job.workers[1]->PullRows(0, 0, ids.data(), 1, row.data()).ok());
  CHECK(row == std::vector<float>{-3, -3});
  REQUIRE(job.workers[1]->PushRows(0, 0, ids.data(), 1, g.data()).ok());
  REQUIRE(job.workers[0]->PullRows(0, 0, ids.data(), 1, row.data()).ok());
  CHECK(row == std::vector<float>{-4, -4});
}

TEST_CASE("sparse sync: a server's part over the message limit is refused by the client, naming it", "[sparse]") {
  Job job(Mode::kSync);
  ClientOptions small = job.cluster.ClientFor(0, TableLayout());
  small.max_message_bytes = 1 << 20;
  auto client = job.cluster.Worker(small);
  std::vector<int64_t> ids(200000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  std::vector<float> g(ids.size() * 2, 1.0f);
  const absl::Status s = client->PushRows(0, 0, ids.data(), ids.size(), g.data());
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(s.message()), Catch::Contains("use fewer ids a step or more servers"));
  CHECK(client->PushRows(0, 7, ids.data(), 1, g.data()).code() == absl::StatusCode::kInvalidArgument);
}

class RawRows {
 public:
  RawRows() : cluster_(SyncOptions(1, 2), Host()), stub_(cluster_.RawStub(0)) {
    worker_ = cluster_.Worker(0, TableLayout(100));
    REQUIRE(worker_->Init(Zeros(TableLayout(100))).ok());
    session_ = worker_session();
  }
  static HostOptions Host() {
    HostOptions h;
    h.max_message_bytes = 1 << 20;
    return h;
  }
  uint64_t worker_session() {
    wire::RegisterRequest reg;
    reg.set_rank(1);
    JobView v = SyncOptions(1, 2).job;
    v.layout_hash = LayoutHash(TableLayout(100));
    *reg.mutable_view() = JobViewToProto(v);
    wire::RegisterResponse resp;
    grpc::ClientContext ctx;
    REQUIRE(stub_->Register(&ctx, reg, &resp).ok());
    return resp.session_id();
  }
  // A push of `parts` (table, ids) over the ids and rows given.
  grpc::Status PushParts(std::vector<std::pair<uint32_t, uint64_t>> parts, std::vector<int64_t> ids,
                         std::vector<float> rows, wire::DType dtype = wire::DTYPE_FLOAT32) {
    wire::PushRowsRequest req;
    req.set_session_id(session_);
    req.set_dtype(dtype);
    for (auto [table, n] : parts) {
      wire::RowsPart* p = req.add_parts();
      p->set_table(table);
      p->set_ids(n);
    }
    req.set_ids(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
    req.set_rows(reinterpret_cast<const char*>(rows.data()), rows.size() * 4);
    wire::PushRowsResponse resp;
    grpc::ClientContext ctx;
    return stub_->PushRows(&ctx, req, &resp);
  }
  grpc::Status Push(uint32_t table, std::vector<int64_t> ids, std::vector<float> rows) {
    wire::PushRowsRequest req;
    req.set_session_id(session_);
    req.set_table(table);
    req.set_dtype(wire::DTYPE_FLOAT32);
    req.set_ids(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
    req.set_rows(reinterpret_cast<const char*>(rows.data()), rows.size() * 4);
    wire::PushRowsResponse resp;
    grpc::ClientContext ctx;
    return stub_->PushRows(&ctx, req, &resp);
  }
  std::vector<float> Row(int64_t id) {
    wire::PullRowsRequest req;
    req.set_session_id(session_);
    req.set_ids(reinterpret_cast<const char*>(&id), 8);
    wire::PullRowsResponse resp;
    grpc::ClientContext ctx;
    REQUIRE(stub_->PullRows(&ctx, req, &resp).ok());
    REQUIRE(resp.rows().size() == 8);
    std::vector<float> out(2);
    std::memcpy(out.data(), resp.rows().data(), 8);
    return out;
  }
  int64_t Refused() { return cluster_.core(0)->Stats().refused; }

  TestCluster cluster_;
  std::unique_ptr<wire::ParameterService::Stub> stub_;
  std::unique_ptr<PsClient> worker_;
  uint64_t session_ = 0;
};

TEST_CASE_METHOD(RawRows, "sparse bad input: a clear status each, nothing applied, the server keeps serving",
                 "[sparse][bad_input]") {
  const int64_t before = Refused();
  Expect(Push(3, {1}, {1, 1}), grpc::StatusCode::NOT_FOUND, "unknown table 3");
  Expect(Push(0, {100}, {1, 1}), grpc::StatusCode::INVALID_ARGUMENT, "outside its vocabulary [0, 100)");
  Expect(Push(0, {1, 2}, {1, 1}), grpc::StatusCode::INVALID_ARGUMENT, "need 16 bytes of rows; the push has 8");
  Expect(Push(0, {1}, {1, NAN}), grpc::StatusCode::INVALID_ARGUMENT, "not finite");
  std::vector<int64_t> many(200000, 1);
  Expect(Push(0, many, {}), grpc::StatusCode::RESOURCE_EXHAUSTED, "");
  CHECK(Refused() >= before + 4);
  CHECK(Row(1) == std::vector<float>{0, 0});
  REQUIRE(Push(0, {1}, {2, 2}).ok());  // buffered: worker 0 has not pushed step 0
  REQUIRE(worker_->PushRows(0, 0, nullptr, 0, nullptr).ok());
  CHECK(Row(1) == std::vector<float>{-1, -1});
}

TEST_CASE_METHOD(RawRows, "a push of several parts that do not add up applies none of them", "[sparse][bad_input]") {
  const int64_t before = Refused();
  Expect(PushParts({{0, 1}, {0, 1}}, {1, 2}, {1, 1, 1, 1}), grpc::StatusCode::INVALID_ARGUMENT, "names table 0 twice");
  Expect(PushParts({{0, 1}, {3, 0}}, {1}, {1, 1}), grpc::StatusCode::NOT_FOUND, "unknown table 3");
  Expect(PushParts({{0, 3}}, {1, 2}, {1, 1, 1, 1}), grpc::StatusCode::INVALID_ARGUMENT, "goes past the push's ids");
  Expect(PushParts({{0, 1}}, {1, 2}, {1, 1, 1, 1}), grpc::StatusCode::INVALID_ARGUMENT,
         "the parts hold 8 bytes of ids and 8 of rows; the push has 16 and 16");
  Expect(PushParts({{0, 0}, {0, 0}}, {}, {}, wire::DTYPE_UNSPECIFIED), grpc::StatusCode::INVALID_ARGUMENT,
         "want float32 or bfloat16");  // no dtype: refused before any size is worked out from it
  CHECK(Refused() == before + 5);
  CHECK(Row(1) == std::vector<float>{0, 0});
  REQUIRE(PushParts({{0, 1}}, {1}, {2, 2}).ok());  // one part that adds up: buffered for the step
  REQUIRE(worker_->PushRows(0, 0, nullptr, 0, nullptr).ok());
  CHECK(Row(1) == std::vector<float>{-1, -1});
}

// Bytes as one slice, as a peer that is not a ShardPS client may send them.
grpc::ByteBuffer Raw(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_CASE_METHOD(RawRows, "malformed row messages: refused by name, the server keeps serving", "[sparse][bad_input]") {
  const std::string kPushRows = "/shardps.wire.ParameterService/PushRows";
  const int64_t before = Refused();
  Expect(cluster_.RawCall(0, kPushRows, Raw(std::string("\x2a\x02\x01", 3))), grpc::StatusCode::INVALID_ARGUMENT,
         "field 5 is cut short");
  Expect(cluster_.RawCall(0, "/shardps.wire.ParameterService/PullRows", Raw("\xff\xff")),
         grpc::StatusCode::INVALID_ARGUMENT, "PullRowsRequest");
  wire::PushRowsRequest twice;
  twice.set_session_id(session_);
  twice.set_rows(std::string(8, '\0'));
  twice.set_ids(std::string(8, '\0'));
  Expect(cluster_.RawCall(0, kPushRows, Raw(twice.SerializeAsString() + twice.SerializeAsString())),
         grpc::StatusCode::INVALID_ARGUMENT, "field 4 comes twice");
  CHECK(Refused() == before + 3);
  CHECK(Row(1) == std::vector<float>{0, 0});
}

TEST_CASE("a server refuses a negative --row_ttl_steps or --row_admit_count, naming it", "[sparse]") {
  ManualClock clock;
  ServerOptions ttl = SyncOptions(1, 1);
  ttl.row_ttl_steps = -1;
  absl::StatusOr<std::unique_ptr<ParameterServer>> a = ParameterServer::Create(ttl, &clock);
  REQUIRE(a.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(a.status().message()), Catch::Contains("row_ttl_steps is -1"));
  ServerOptions admit = SyncOptions(1, 1);
  admit.row_admit_count = -2;
  absl::StatusOr<std::unique_ptr<ParameterServer>> b = ParameterServer::Create(admit, &clock);
  REQUIRE(b.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(b.status().message()), Catch::Contains("row_admit_count is -2"));
}

}  // namespace
}  // namespace shardps::testing
