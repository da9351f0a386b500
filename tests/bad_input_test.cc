// Every bad input gets a precise status code, is counted, and the server
// keeps serving. Requests are crafted with a raw stub over real gRPC.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>


#include "common/rpc_metadata.h"
#include "common/tensor_frame.h"
#include "tests/expect_status.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

class BadInputFixture {
 public:
  BadInputFixture() : cluster_(Options(), Host()), stub_(cluster_.RawStub(0)) {
    worker_ = cluster_.Worker(0);
    REQUIRE(worker_->Init(Zeros(SmallLayout())).ok());
    wire::RegisterRequest reg;
    reg.set_rank(1);
    *reg.mutable_view() = View();
    wire::RegisterResponse resp;
    grpc::ClientContext ctx;
    REQUIRE(stub_->Register(&ctx, reg, &resp).ok());
    session_ = resp.session_id();
  }

  static ServerOptions Options() { return SyncOptions(1, 2); }
  static HostOptions Host() {
    HostOptions h;
    h.max_message_bytes = 1 << 20;
    return h;
  }
  static wire::JobView View() {
    JobView v = Options().job;
    v.layout_hash = LayoutHash(SmallLayout());
    return JobViewToProto(v);
  }

  // A push of key (0, 0), 4 floats, from the raw session.
  wire::PushRequest GoodPush() const {
    wire::PushRequest req;
    req.set_session_id(session_);
    req.set_step(0);
    wire::Chunk* c = req.add_chunks();
    c->mutable_key()->set_tensor(0);
    c->mutable_key()->set_chunk(0);
    c->set_dtype(wire::DTYPE_FLOAT32);
    c->set_data(std::string(16, '\0'));
    return req;
  }

  grpc::Status Push(const wire::PushRequest& req) {
    wire::PushResponse resp;
    grpc::ClientContext ctx;
    return stub_->Push(&ctx, req, &resp);
  }

  // The server still answers: an admin status call succeeds.
  bool StillServing() {
    const std::optional<wire::ServerStatus> status = cluster_.AdminStatus(0);
    return status.has_value() && status->initialized();
  }
  int64_t Refused() { return cluster_.core(0)->Stats().refused; }

  TestCluster cluster_;
  std::unique_ptr<wire::ParameterService::Stub> stub_;
  std::unique_ptr<PsClient> worker_;
  uint64_t session_ = 0;
};

TEST_CASE_METHOD(BadInputFixture, "a good push is accepted (control)", "[bad_input]") {
  REQUIRE(Push(GoodPush()).ok());
}

TEST_CASE_METHOD(BadInputFixture, "unknown key: NOT_FOUND naming it", "[bad_input]") {
  wire::PushRequest req = GoodPush();
  req.mutable_chunks(0)->mutable_key()->set_chunk(99);
  const int64_t before = Refused();
  Expect(Push(req), grpc::StatusCode::NOT_FOUND, "(tensor 0, chunk 99)");
  REQUIRE(Refused() == before + 1);
  req.mutable_chunks(0)->mutable_key()->set_tensor(7);
  Expect(Push(req), grpc::StatusCode::NOT_FOUND, "not in the layout");
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "payload of the wrong size: INVALID_ARGUMENT", "[bad_input]") {
  wire::PushRequest req = GoodPush();
  req.mutable_chunks(0)->set_data(std::string(12, '\0'));
  Expect(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "12 bytes; want 16");
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "a negative base version: INVALID_ARGUMENT naming it, nothing applied",
                 "[bad_input]") {
  wire::PushRequest req = GoodPush();
  req.mutable_chunks(0)->set_base_version(-3);
  const int64_t before = Refused();
  Expect(Push(req), grpc::StatusCode::INVALID_ARGUMENT,
         "the base version of key (tensor 0, chunk 0) is -3; want 0 to 2^62");
  REQUIRE(Refused() == before + 1);
  req.mutable_chunks(0)->set_base_version(0);  // the same push, well formed: still step 0's
  REQUIRE(Push(req).ok());
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "payload of the wrong type: INVALID_ARGUMENT", "[bad_input]") {
  const int64_t before = Refused();
  for (wire::DType dtype : {wire::DTYPE_FLOAT16, wire::DTYPE_UNSPECIFIED, static_cast<wire::DType>(42)}) {
    wire::PushRequest req = GoodPush();
    req.mutable_chunks(0)->set_dtype(dtype);
    Expect(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "; want DTYPE_FLOAT32 or DTYPE_BFLOAT16");
  }
  // bfloat16 is taken, at 2 bytes a value: 16 bytes are 8 values, not 4.
  wire::PushRequest narrow = GoodPush();
  narrow.mutable_chunks(0)->set_dtype(wire::DTYPE_BFLOAT16);
  Expect(Push(narrow), grpc::StatusCode::INVALID_ARGUMENT, "16 bytes; want 8 (4 bfloat16 values)");
  const uint16_t nan_at_3[4] = {0x3f80, 0x3f80, 0x3f80, 0x7fc0};
  narrow.mutable_chunks(0)->set_data(std::string(reinterpret_cast<const char*>(nan_at_3), 8));
  Expect(Push(narrow), grpc::StatusCode::INVALID_ARGUMENT, "NaN or Inf at index 3");
  REQUIRE(Refused() == before + 5);
  // A pull may ask for float32 or bfloat16 only.
  for (const bool raw : {false, true}) {
    wire::PullRequest pull;
    pull.set_session_id(session_);
    pull.add_keys()->set_tensor(0);
    pull.set_dtype(wire::DTYPE_FLOAT16);
    grpc::Status status;
    if (raw) {
      grpc::ByteBuffer response;
      status = cluster_.RawCall(0, kRawPullMethod, MessageBuffer(pull), &response);
    } else {
      wire::PullResponse response;
      grpc::ClientContext ctx;
      status = stub_->Pull(&ctx, pull, &response);
    }
    INFO((raw ? "raw" : "protobuf") << " pull");
    Expect(status, grpc::StatusCode::INVALID_ARGUMENT, "pull asks for dtype DTYPE_FLOAT16; want DTYPE_FLOAT32 or DTYPE_BFLOAT16");
  }
  REQUIRE(Refused() == before + 7);
  narrow.mutable_chunks(0)->set_data(std::string(8, '\0'));
  REQUIRE(Push(narrow).ok());  // a good bfloat16 push is accepted
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "NaN or Inf in a gradient: INVALID_ARGUMENT, nothing applied", "[bad_input]") {
  for (float bad : {std::nanf(""), INFINITY}) {
    wire::PushRequest req = GoodPush();
    float values[4] = {1, 2, bad, 4};
    req.mutable_chunks(0)->set_data(std::string(reinterpret_cast<char*>(values), 16));
    Expect(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "index 2");
  }
  REQUIRE(Push(GoodPush()).ok());  // the worker's step-0 push is still accepted
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "unregistered session: ABORTED", "[bad_input]") {
  wire::PushRequest req = GoodPush();
  req.set_session_id(12345);
  Expect(Push(req), grpc::StatusCode::ABORTED, "register");
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "mismatched job view: FAILED_PRECONDITION naming the field", "[bad_input]") {
  struct Case {
    std::function<void(wire::JobView&)> change;
    std::string text;
  };
  const std::vector<Case> cases = {
      {[](wire::JobView& v) { v.set_mode(wire::MODE_ASYNC); }, "mode is async on the worker but sync on the server"},
      {[](wire::JobView& v) { v.set_num_workers(5); }, "num_workers is 5 on the worker but 2"},
      {[](wire::JobView& v) { v.set_num_servers(3); }, "num_servers is 3"},
      {[](wire::JobView& v) { v.set_partition_bytes(64); }, "partition_bytes is 64"},
      {[](wire::JobView& v) { v.set_layout_hash(42); }, "layout_hash"},
  };
  for (const Case& c : cases) {
    wire::RegisterRequest reg;
    reg.set_rank(1);
    *reg.mutable_view() = View();
    c.change(*reg.mutable_view());
    wire::RegisterResponse resp;
    grpc::ClientContext ctx;
    Expect(stub_->Register(&ctx, reg, &resp), grpc::StatusCode::FAILED_PRECONDITION, c.text);
  }
  wire::RegisterRequest reg;
  reg.set_rank(9);
  *reg.mutable_view() = View();
  wire::RegisterResponse resp;
  grpc::ClientContext ctx;
  Expect(stub_->Register(&ctx, reg, &resp), grpc::StatusCode::INVALID_ARGUMENT, "rank 9");
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "oversized message: RESOURCE_EXHAUSTED", "[bad_input]") {
  wire::PushRequest req = GoodPush();
  req.mutable_chunks(0)->set_data(std::string(2 << 20, '\0'));
  REQUIRE(Push(req).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "Init with another shape: FAILED_PRECONDITION; same shape: ignored", "[bad_input]") {
  wire::InitRequest init;
  init.set_session_id(session_);
  *init.mutable_layout() = LayoutToProto(Layout{{{"w", {4, 5}}, {"b", {5}}}});
  wire::InitResponse resp;
  {
    grpc::ClientContext ctx;
    Expect(stub_->Init(&ctx, init, &resp), grpc::StatusCode::FAILED_PRECONDITION, "w[4,5]");
  }
  *init.mutable_layout() = LayoutToProto(SmallLayout());
  grpc::ClientContext ctx;
  REQUIRE(stub_->Init(&ctx, init, &resp).ok());
  REQUIRE(resp.outcome() == wire::INIT_ALREADY_DONE);
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "malformed layout or empty requests: INVALID_ARGUMENT", "[bad_input]") {
  wire::InitRequest init;
  init.set_session_id(session_);
  init.mutable_layout()->add_tensors()->set_name("x;y");
  init.mutable_layout()->mutable_tensors(0)->add_dims(3);
  wire::InitResponse resp;
  grpc::ClientContext ctx;
  Expect(stub_->Init(&ctx, init, &resp), grpc::StatusCode::INVALID_ARGUMENT, "tensor name");
  wire::PushRequest empty = GoodPush();
  empty.clear_chunks();
  Expect(Push(empty), grpc::StatusCode::INVALID_ARGUMENT, "no chunks");
  wire::PushRequest negative = GoodPush();
  negative.set_step(-1);
  Expect(Push(negative), grpc::StatusCode::INVALID_ARGUMENT, "step is -1");
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "a step beyond 2^62: INVALID_ARGUMENT, and the job's step stays where it is",
                 "[bad_input]") {
  // Found by tests:wire_fuzz_test: a registration resuming at INT64_MAX was
  // taken, every later worker continued at that step, and its next pull
  // named INT64_MIN.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t refused = Refused();
  auto register_at = [&](std::optional<int64_t> resume, wire::RegisterResponse* resp) {
    wire::RegisterRequest reg;
    reg.set_rank(1);
    *reg.mutable_view() = View();
    if (resume) reg.set_resume_step(*resume);
    grpc::ClientContext ctx;
    return stub_->Register(&ctx, reg, resp);
  };
  wire::RegisterResponse resp;
  Expect(register_at(kMax, &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "resume step is 9223372036854775807; want 0 to 2^62");
  Expect(register_at((int64_t{1} << 62) + 1, &resp), grpc::StatusCode::INVALID_ARGUMENT, "want 0 to 2^62");
  REQUIRE(register_at(std::nullopt, &resp).ok());
  REQUIRE(resp.current_step() == 0);
  session_ = resp.session_id();
  REQUIRE(register_at(int64_t{1} << 62, &resp).ok());  // the bound itself is a step
  session_ = resp.session_id();

  wire::PushRequest push = GoodPush();
  push.set_step(kMax);
  Expect(Push(push), grpc::StatusCode::INVALID_ARGUMENT, "push step is 9223372036854775807");
  wire::PullRequest pull;
  pull.set_session_id(session_);
  pull.set_step(kMax);
  *pull.add_keys() = push.chunks(0).key();
  wire::PullResponse pulled;
  {
    grpc::ClientContext ctx;
    Expect(stub_->Pull(&ctx, pull, &pulled), grpc::StatusCode::INVALID_ARGUMENT, "pull step is 9223372036854775807");
  }
  wire::RewindRequest rewind;
  rewind.set_timeline(kMax);
  wire::RestartedServer* restarted = rewind.add_restarted();
  restarted->set_server_id(0);
  restarted->set_incarnation(cluster_.core(0)->incarnation());
  wire::RewindResponse rewound;
  grpc::ClientContext ctx;
  Expect(stub_->Rewind(&ctx, rewind, &rewound), grpc::StatusCode::INVALID_ARGUMENT, "rewind timeline is");
  REQUIRE(Refused() == refused + 5);
  REQUIRE(StillServing());
}


grpc::ByteBuffer Bytes(const std::string& b) {
  grpc::Slice s(b);
  return grpc::ByteBuffer(&s, 1);
}

TEST_CASE_METHOD(BadInputFixture, "raw framing: good and malformed pushes, unknown methods", "[bad_input]") {
  auto raw_push = [&](const wire::PushRequest& header, const std::string& payload) {
    grpc::ByteBuffer response;
    return cluster_.RawCall(0, kRawPushMethod, EncodeFrame(header, {absl::string_view(payload)}), &response);
  };
  wire::PushRequest header = GoodPush();
  header.mutable_chunks(0)->clear_data();
  header.mutable_chunks(0)->set_raw_bytes(16);
  const float nan_at_1[4] = {0, std::nanf(""), 0, 0};
  const int64_t refused = Refused();

  Expect(raw_push(header, std::string(12, '\0')), grpc::StatusCode::INVALID_ARGUMENT,
         "chunks declare 16 payload bytes; the frame carries 12");
  {
    // Sizes that add up past INT64_MAX (to 16 once wrapped: before, they
    // passed, and the first chunk read 2^63 - 1 bytes of a 16-byte payload).
    wire::PushRequest wraps = header;
    wraps.mutable_chunks(0)->set_raw_bytes(std::numeric_limits<int64_t>::max());
    for (int64_t bytes : {std::numeric_limits<int64_t>::max(), int64_t{18}}) {
      wire::Chunk* c = wraps.add_chunks();
      *c = header.chunks(0);
      c->mutable_key()->set_chunk(wraps.chunks_size() - 1);
      c->set_raw_bytes(bytes);
    }
    Expect(raw_push(wraps, std::string(16, '\0')), grpc::StatusCode::INVALID_ARGUMENT,
           "chunks declare over 2^63 payload bytes; the frame carries 16");
  }
  Expect(raw_push(header, std::string(reinterpret_cast<const char*>(nan_at_1), 16)),
         grpc::StatusCode::INVALID_ARGUMENT, "index 1");
  wire::PushRequest with_data = GoodPush();  // data inside the header is not allowed
  with_data.mutable_chunks(0)->set_raw_bytes(16);
  Expect(raw_push(with_data, std::string(16, '\0')), grpc::StatusCode::INVALID_ARGUMENT, "no data");
  grpc::ByteBuffer response;
  Expect(cluster_.RawCall(0, kRawPushMethod, Bytes("xy"), &response), grpc::StatusCode::INVALID_ARGUMENT,
         "no header length");
  Expect(cluster_.RawCall(0, kRawPullMethod, Bytes("\xff\xff\xff"), &response), grpc::StatusCode::INVALID_ARGUMENT,
         "does not parse");
  Expect(cluster_.RawCall(0, "/shardps.wire.RawTensors/Nope", Bytes(""), &response),
         grpc::StatusCode::UNIMPLEMENTED, "unknown method /shardps.wire.RawTensors/Nope");
  REQUIRE(Refused() == refused + 6);  // the unknown method is not a refused request

  REQUIRE(raw_push(header, std::string(16, '\0')).ok());  // a good raw push is accepted
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "bytes that are not the request message: INVALID_ARGUMENT naming it",
                 "[bad_input]") {
  const std::string garbage = "\x0a\xff\xff\xff";  // field 1, a length that runs past the end
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"Register", "RegisterRequest"}, {"Init", "InitRequest"},         {"Push", "PushRequest"},
      {"Pull", "PullRequest"},         {"Heartbeat", "HeartbeatRequest"}, {"Admin", "AdminRequest"},
      {"Rewind", "RewindRequest"}};
  const int64_t refused = Refused();
  const std::string incarnation = IncarnationText(cluster_.core(0)->incarnation());
  for (const auto& [method, message] : methods) {
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1), response;
    std::string answered_by;
    const grpc::Status s =
        cluster_.RawCall(0, "/shardps.wire.ParameterService/" + method, request, &response, &answered_by);
    Expect(s, grpc::StatusCode::INVALID_ARGUMENT, "request does not parse as shardps.wire." + message);
    REQUIRE(answered_by == incarnation);  // errors carry the incarnation too
  }
  REQUIRE(Refused() == refused + static_cast<int64_t>(methods.size()));
  REQUIRE(StillServing());
}

TEST_CASE_METHOD(BadInputFixture, "every answer carries the server's incarnation", "[bad_input]") {
  wire::AdminRequest req;
  req.set_action(wire::ADMIN_STATUS);
  grpc::ByteBuffer response;
  std::string answered_by;
  REQUIRE(cluster_.RawCall(0, "/shardps.wire.ParameterService/Admin", MessageBuffer(req), &response, &answered_by).ok());
  REQUIRE(ParseIncarnation(answered_by) == cluster_.core(0)->incarnation());
  grpc::Slice empty("");
  grpc::ByteBuffer none(&empty, 1);
  Expect(cluster_.RawCall(0, "/shardps.wire.Nothing/Here", none, &response, &answered_by),
         grpc::StatusCode::UNIMPLEMENTED, "unknown method /shardps.wire.Nothing/Here");
  REQUIRE(ParseIncarnation(answered_by) == cluster_.core(0)->incarnation());
}

TEST_CASE("dead session: ABORTED until the worker registers again", "[bad_input]") {
  ManualClock clock;
  ServerOptions o = SyncOptions(1, 1);
  o.worker_timeout = absl::Seconds(10);
  auto core = ParameterServer::Create(o, &clock);
  REQUIRE(core.ok());
  JobView view = o.job;
  view.layout_hash = LayoutHash(SmallLayout());
  auto reg = (*core)->Register(0, view, std::nullopt);
  REQUIRE(reg.ok());
  for (int i = 0; i < 22; ++i) {  // 11 s in ticks, each shorter than the pause threshold
    clock.Advance(absl::Milliseconds(500));
    (*core)->Tick();
  }
  auto hb = (*core)->Heartbeat(reg->session_id);
  REQUIRE(hb.status().code() == absl::StatusCode::kAborted);
  REQUIRE_THAT(std::string(hb.status().message()), Catch::Contains("expired"));
  auto again = (*core)->Register(0, view, std::nullopt);
  REQUIRE(again.ok());
  REQUIRE((*core)->Heartbeat(again->session_id).ok());
  REQUIRE((*core)->Stats().dead_workers_total == 1);
}

}  // namespace
}  // namespace shardps::testing
