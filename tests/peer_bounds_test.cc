// What a peer chooses the size or order of, over real gRPC with a raw stub:
// a pull naming a key twice, a layout too large to count or to key, and a
// refused registration arriving first. Each gets a clear status at once and
// the server keeps serving the job it was meant for.
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "common/key_partition.h"
#include "common/layout.h"
#include "tests/expect_status.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// A raw registration of rank 1 with `view` on `stub`: its status, and the
// session into `session` when it is accepted.
grpc::Status RegisterRaw(wire::ParameterService::Stub& stub, const JobView& view, uint64_t* session = nullptr) {
  wire::RegisterRequest reg;
  reg.set_rank(1);
  *reg.mutable_view() = JobViewToProto(view);
  wire::RegisterResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub.Register(&ctx, reg, &resp);
  if (s.ok() && session != nullptr) *session = resp.session_id();
  return s;
}

JobView ViewOf(const ServerOptions& o, const Layout& layout) {
  JobView v = o.job;
  v.layout_hash = LayoutHash(layout);
  return v;
}

wire::Layout HugeLayout(int64_t rows, int64_t cols) {
  wire::Layout layout;
  wire::TensorSpec* t = layout.add_tensors();
  t->set_name("w");
  t->add_dims(rows);
  t->add_dims(cols);
  return layout;
}

TEST_CASE("a pull naming a key twice: INVALID_ARGUMENT naming it, nothing copied", "[peer_bounds]") {
  const ServerOptions o = SyncOptions(1, 2);
  TestCluster cluster(o);
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  auto stub = cluster.RawStub(0);
  uint64_t session = 0;
  REQUIRE(RegisterRaw(*stub, ViewOf(o, SmallLayout()), &session).ok());
  wire::PullRequest pull;
  pull.set_session_id(session);
  pull.set_step(0);
  for (int i = 0; i < 100000; ++i) {  // 200 KB on the wire; 16-byte keys copied each time: 1.6 MB (32 KB keys: 3.2 GB)
    wire::Key* k = pull.add_keys();
    k->set_tensor(0);
    k->set_chunk(0);
  }
  wire::PullResponse resp;
  grpc::ClientContext ctx;
  Expect(stub->Pull(&ctx, pull, &resp), grpc::StatusCode::INVALID_ARGUMENT, "pull names key (tensor 0, chunk 0) twice");
  // The client refuses the same before sending.
  auto w = Zeros(SmallLayout());
  const absl::Status twice = worker->Pull(0, {{0, w[0].data()}, {0, w[0].data()}});
  CHECK(twice.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(twice.message()) == "pull names tensor 0 twice");
  REQUIRE(worker->Pull(0, {{0, w[0].data()}, {1, w[1].data()}}).ok());  // still serving
}

TEST_CASE("a layout of more than 2^40 values, or of too many keys: INVALID_ARGUMENT at once", "[peer_bounds]") {
  const ServerOptions o = SyncOptions(1, 2);  // 16-byte partitions
  TestCluster cluster(o);
  auto stub = cluster.RawStub(0);
  SECTION("2^40 x 2^20 values (the product overflows no counter)") {
    uint64_t session = 0;
    Expect(RegisterRaw(*stub, o.job), grpc::StatusCode::INVALID_ARGUMENT, "no layout hash");
    JobView v = o.job;
    v.layout_hash = 7;
    REQUIRE(RegisterRaw(*stub, v, &session).ok());
    wire::InitRequest init;
    init.set_session_id(session);
    *init.mutable_layout() = HugeLayout(int64_t{1} << 40, int64_t{1} << 20);
    wire::InitResponse resp;
    grpc::ClientContext ctx;
    Expect(stub->Init(&ctx, init, &resp), grpc::StatusCode::INVALID_ARGUMENT, "tensor w has more than 2^40 values");
  }
  SECTION("2^30 values in 16-byte keys: 2^28 keys") {
    Layout layout;
    layout.tensors.push_back({"w", {int64_t{1} << 15, int64_t{1} << 15}});
    uint64_t session = 0;
    REQUIRE(RegisterRaw(*stub, ViewOf(o, layout), &session).ok());
    wire::InitRequest init;
    init.set_session_id(session);
    *init.mutable_layout() = LayoutToProto(layout);
    wire::InitResponse resp;
    grpc::ClientContext ctx;
    Expect(stub->Init(&ctx, init, &resp), grpc::StatusCode::INVALID_ARGUMENT, "raise partition_bytes");
  }
  // Nothing was built, and the server still answers.
  const std::optional<wire::ServerStatus> status = cluster.AdminStatus(0);
  REQUIRE(status.has_value());
  CHECK_FALSE(status->initialized());
  CHECK(cluster.core(0)->Stats().num_keys == 0);
}

TEST_CASE("a refused registration does not fix the job's layout: the next good one is taken", "[peer_bounds]") {
  const ServerOptions o = SyncOptions(1, 2);
  TestCluster cluster(o);  // fresh: no worker has registered yet
  auto stub = cluster.RawStub(0);
  JobView stray = ViewOf(o, SmallLayout());
  stray.mode = Mode::kAsync;
  stray.layout_hash = 42;  // another model too
  Expect(RegisterRaw(*stub, stray), grpc::StatusCode::FAILED_PRECONDITION, "mode is async");
  REQUIRE(RegisterRaw(*stub, ViewOf(o, SmallLayout())).ok());
  auto worker = cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  // Once taken, another layout is refused, naming the hash.
  JobView other = ViewOf(o, SmallLayout());
  other.layout_hash = 42;
  Expect(RegisterRaw(*stub, other), grpc::StatusCode::FAILED_PRECONDITION, "layout_hash");
}

}  // namespace
}  // namespace shardps::testing
