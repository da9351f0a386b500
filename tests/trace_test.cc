// common/trace.h: the events a trace records and the JSON it writes.
#include <catch2/catch.hpp>

#include "common/trace.h"
#include "tests/temp_dir.h"

namespace shardps {
namespace {

const absl::Time kT0 = absl::FromUnixMicros(1'700'000'000'000'000);

TEST_CASE("a trace writes spans, async spans and instants as trace-event JSON", "[trace]") {
  Trace trace("ps_worker 3");
  trace.Span("compute", "forward 0", kT0, kT0 + absl::Microseconds(250), {{"step", 7}});
  trace.Async("push", "push t1 \"w\"", kT0 + absl::Microseconds(100), kT0 + absl::Microseconds(900),
              {{"bytes", 4096}});
  trace.Instant("step", "step 7", kT0);
  CHECK(trace.events() == 4);  // an async span is a begin and an end
  const std::string json = trace.Json();
  CHECK_THAT(json, Catch::Contains("\"name\": \"process_name\""));
  CHECK_THAT(json, Catch::Contains("\"args\": {\"name\": \"ps_worker 3\"}"));
  CHECK_THAT(json, Catch::Contains("\"args\": {\"name\": \"compute\"}"));
  CHECK_THAT(json, Catch::Contains("\"ph\": \"X\", \"name\": \"forward 0\""));
  CHECK_THAT(json, Catch::Contains("\"ts\": 1700000000000000, \"dur\": 250"));
  CHECK_THAT(json, Catch::Contains("\"args\": {\"step\": 7}"));
  CHECK_THAT(json, Catch::Contains("\"ph\": \"b\", \"name\": \"push t1 \\\"w\\\"\""));  // quotes escaped
  CHECK_THAT(json, Catch::Contains("\"ts\": 1700000000000900, \"cat\": \"push\", \"id\": 1"));
  CHECK_THAT(json, Catch::Contains("\"ph\": \"i\", \"name\": \"step 7\""));
  CHECK_THAT(json, Catch::Contains("\"dropped_events\": 0"));
}

TEST_CASE("a full trace counts what it drops, and a span never has a negative length", "[trace]") {
  Trace trace("ps_server 0", /*max_events=*/2);
  trace.Span("apply", "a", kT0, kT0 - absl::Microseconds(5));
  trace.Span("apply", "b", kT0, kT0);
  trace.Span("apply", "c", kT0, kT0);
  CHECK(trace.events() == 2);
  CHECK(trace.dropped() == 1);
  const std::string json = trace.Json();
  CHECK_THAT(json, Catch::Contains("\"dur\": 0"));
  CHECK_THAT(json, !Catch::Contains("\"name\": \"c\""));
  CHECK_THAT(json, Catch::Contains("\"dropped_events\": 1"));
}

TEST_CASE("a trace is written to its file, and an unwritable path is an error naming it", "[trace]") {
  const std::string dir = testing::TempDir("trace_test");
  Trace trace("ps_worker 0");
  trace.Instant("step", "step 0", kT0);
  const std::string path = dir + "/trace.json";
  REQUIRE(trace.Write(path).ok());
  CHECK(testing::ReadFile(path) == trace.Json());
  const absl::Status bad = trace.Write(dir + "/no/such/dir/trace.json");
  CHECK(bad.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(bad.message()), Catch::Contains("no/such/dir/trace.json"));
}

}  // namespace
}  // namespace shardps
