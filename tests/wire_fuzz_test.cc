// A peer that sends anything. Each method a server serves gets hundreds of
// requests over real gRPC, each a good request with random fields changed
// (tests/proto_mutator.h) or with its bytes damaged: a job with two servers,
// each key on both (--replicas=2), and a sparse table, in sync and in async.
// Every request must be answered in time with one of the codes the wire
// documents (proto/shardps.proto; docs/internals.md), and the servers must
// keep answering. For the methods a worker calls, a refused request must
// change nothing a worker pulls, and afterwards two real workers must train
// a step. (Rewind, Replicate and Join may take the job apart by design, as
// may a view of the job's servers in their metadata, which these requests
// carry now and then: for them the servers must answer, no more.)
//
// The seed is fixed, so a failure repeats; SHARDPS_FUZZ_SEED and
// SHARDPS_FUZZ_ROUNDS run another campaign (tools/fuzz_wire runs many).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/job_view.h"
#include "common/key_partition.h"
#include "common/table_spec.h"
#include "common/tensor_frame.h"
#include "tests/fuzz_job.h"
#include "tests/proto_mutator.h"

namespace shardps::testing {
namespace {

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

// One method's fuzzing: a good request (built afresh each round, so it
// carries the session of the moment), how it goes on the wire, and whether
// it may wait (a pull waits for its version: DEADLINE_EXCEEDED is an answer).
struct Target {
  std::string name;
  std::string method;
  std::function<std::unique_ptr<google::protobuf::Message>(FuzzJob&, int server)> seed;
  bool framed = false;  // the raw framing: a header and the payload bytes its chunks declare
  bool may_wait = false;
  bool changes_job = false;  // may legitimately take the job apart (Join, Replicate, Rewind, views)
};

// The payload a framed header declares, zeros or, now and then, damaged.
std::string PayloadFor(const google::protobuf::Message& header, ProtoMutator& mutator) {
  std::string payload(DeclaredPayloadBytes(header), '\0');
  if (mutator.OneIn(3)) payload = mutator.MutateBytes(std::move(payload));
  return payload;
}

grpc::ByteBuffer Copied(const std::string& bytes) {
  grpc::Slice slice(bytes);  // copies
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer Encode(const Target& target, const google::protobuf::Message& request, ProtoMutator& mutator) {
  if (mutator.OneIn(10)) return Copied(mutator.MutateBytes(request.SerializeAsString()));  // almost the message
  if (!target.framed) return MessageBuffer(request);
  const std::string payload = PayloadFor(request, mutator);
  // The frame borrows the payload's memory: copied whole before it goes.
  std::vector<grpc::Slice> slices;
  (void)EncodeFrame(request, {absl::string_view(payload)}).Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (mutator.OneIn(8)) bytes = mutator.MutateBytes(std::move(bytes));  // the frame itself damaged
  return Copied(bytes);
}

std::vector<Target> Targets(Mode mode) {
  using M = std::unique_ptr<google::protobuf::Message>;
  const std::string s = "/shardps.wire.ParameterService/";
  auto target = [](std::string name, std::string method, std::function<M(FuzzJob&, int)> seed) {
    return Target{std::move(name), std::move(method), std::move(seed)};
  };
  std::vector<Target> all = {
      target("Register", s + "Register", [](FuzzJob& j, int t) { return j.GoodRegister(t); }),
      target("Init", s + "Init", [](FuzzJob& j, int t) { return j.GoodInit(t); }),
      target("Push", s + "Push", [](FuzzJob& j, int t) { return j.GoodPush(t, false); }),
      target("raw Push", kRawPushMethod, [](FuzzJob& j, int t) { return j.GoodPush(t, true); }),
      target("Pull", s + "Pull", [](FuzzJob& j, int t) { return j.GoodPull(t); }),
      target("raw Pull", kRawPullMethod, [](FuzzJob& j, int t) { return j.GoodPull(t); }),
      target("PushRows", s + "PushRows", [](FuzzJob& j, int t) { return j.GoodPushRows(t); }),
      target("PullRows", s + "PullRows", [](FuzzJob& j, int t) { return j.GoodPullRows(t); }),
      target("Heartbeat", s + "Heartbeat", [](FuzzJob& j, int t) { return j.GoodHeartbeat(t); }),
      target("Admin", s + "Admin", [](FuzzJob& j, int t) { return j.GoodAdmin(t); }),
      target("Rewind", s + "Rewind", [](FuzzJob& j, int t) { return j.GoodRewind(t); }),
      target("Replicate", s + "Replicate", [](FuzzJob& j, int t) { return j.GoodReplicate(t, false); }),
      target("raw Replicate", kRawReplicateMethod, [](FuzzJob& j, int t) { return j.GoodReplicate(t, true); }),
      target("Join", s + "Join", [](FuzzJob& j, int t) { return j.GoodJoin(t); }),
  };
  for (Target& t : all) {
    t.framed = t.name == "raw Push" || t.name == "raw Replicate";
    t.may_wait = t.name.find("Pull") != std::string::npos;
    // Sync with two copies: a push of step t is answered once the backup
    // holds step t - 1 (server/parameter_server_acks.cc), so one ahead of
    // the job waits as a pull of it does.
    t.may_wait = t.may_wait || (mode == Mode::kSync && t.name.find("Push") != std::string::npos);
    t.changes_job = t.name == "Rewind" || t.name.find("Replicate") != std::string::npos || t.name == "Join";
  }
  return all;
}

// The codes a server may answer with (proto/shardps.proto, "Errors";
// UNAVAILABLE from a server that stepped down, which a peer's view can
// make it do). UNKNOWN or INTERNAL would be a path no check covers.
bool Documented(grpc::StatusCode code, bool may_wait, bool between_servers) {
  switch (code) {
    case grpc::StatusCode::OUT_OF_RANGE:  // Replicate of a timeline not reached yet
      return between_servers;
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNAVAILABLE:
      return true;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return may_wait;
    default:
      return false;
  }
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    default: return "other";
  }
}

bool Refusal(grpc::StatusCode code) {
  return code != grpc::StatusCode::OK && code != grpc::StatusCode::DEADLINE_EXCEEDED;
}

// Runs `rounds` mutated requests of `target` against a fresh job; REQUIREs
// on this (the test's) thread only.
void Fuzz(Mode mode, const Target& target, uint64_t seed, int rounds) {
  FuzzJob job(mode);
  ProtoMutator mutator(seed);
  std::map<grpc::StatusCode, int> answers;  // for the summary: a fuzz that only hits parse errors proves little
  std::vector<float> before = job.Snapshot();
  for (int round = 0; round < rounds; ++round) {
    const int server = mutator.OneIn(4) ? 1 : 0;
    std::unique_ptr<google::protobuf::Message> request = target.seed(job, server);
    mutator.Mutate(request.get());
    job.AvoidStop(request.get());
    const std::string view = target.changes_job && mutator.OneIn(4) ? job.FuzzedView(mutator) : "";
    INFO(target.name << " round " << round << " (seed " << seed << ") to server " << server << ": "
                     << request->ShortDebugString().substr(0, 600) << (view.empty() ? "" : " view " + view));
    const grpc::Status status = job.Call(server, target.method, Encode(target, *request, mutator),
                                         target.may_wait ? absl::Milliseconds(100) : absl::Seconds(20), view);
    INFO("answer " << status.error_code() << ": " << status.error_message());
    REQUIRE(Documented(status.error_code(), target.may_wait, target.name.find("Replicate") != std::string::npos));
    ++answers[status.error_code()];
    if (target.changes_job) continue;  // what a worker sees may change with the job; the server must answer
    std::vector<float> after = job.Snapshot();
    if (Refusal(status.error_code())) REQUIRE(after == before);  // nothing applied
    before = std::move(after);
    job.RenewSessionIfLost();
  }
  std::cout << ModeName(mode) << " " << target.name << ", " << rounds << " rounds (seed " << seed << "):";
  for (const auto& [code, count] : answers) std::cout << " " << CodeName(code) << " " << count;
  std::cout << std::endl;
  INFO(target.name << " after " << rounds << " rounds (seed " << seed << ")");
  REQUIRE(job.StillServing());
  if (target.changes_job) return;
  const absl::Status trains = job.WorkerTrains();
  INFO("a real worker's step: " << trains.message());
  REQUIRE(trains.ok());
}

void FuzzEveryMethod(Mode mode) {
  const uint64_t seed = EnvOr("SHARDPS_FUZZ_SEED", 20261127);
  const int rounds = static_cast<int>(EnvOr("SHARDPS_FUZZ_ROUNDS", 120));
  const std::vector<Target> targets = Targets(mode);
  for (size_t i = 0; i < targets.size(); ++i) {
    DYNAMIC_SECTION(targets[i].name) { Fuzz(mode, targets[i], seed + i, rounds); }
  }
}

TEST_CASE("fuzzed requests to every method, sync job with 2 copies and a table: answered, nothing lost",
          "[fuzz][bad_input]") {
  FuzzEveryMethod(Mode::kSync);
}

TEST_CASE("fuzzed requests to every method, async job with 2 copies and a table: answered, nothing lost",
          "[fuzz][bad_input]") {
  FuzzEveryMethod(Mode::kAsync);
}

}  // namespace
}  // namespace shardps::testing
