// CallFanout (common/fanout.h) and the client's Fanout, which keeps a rejoin
// status before any other error.
#include <optional>

#include "absl/status/status.h"
#include <catch2/catch.hpp>
#include "client/grpc_ps_client.h"
#include "common/fanout.h"

namespace shardps {
namespace {

TEST_CASE("CallFanout runs done once, after the last answer, with the first error") {
  int runs = 0;
  absl::Status got;
  CallFanout all(3, [&](absl::Status s) {
    ++runs;
    got = s;
  });
  all.Finish(absl::OkStatus());
  all.Finish(absl::UnavailableError("first"));
  CHECK(runs == 0);
  all.Finish(absl::InternalError("second"));
  CHECK(runs == 1);
  CHECK(got == absl::UnavailableError("first"));
}

TEST_CASE("CallFanout of answers that all succeed gives OK") {
  std::optional<absl::Status> got;
  CallFanout all(2, [&](absl::Status s) { got = s; });
  all.Finish(absl::OkStatus());
  all.Finish(absl::OkStatus());
  REQUIRE(got.has_value());
  CHECK(got->ok());
}

TEST_CASE("the client's Fanout keeps a rejoin status over an earlier error") {
  absl::Status got;
  Fanout all(3, [&](absl::Status s) { got = s; });
  all.Finish(absl::UnavailableError("server 1 is down"));
  all.Finish(RejoinError("the job was rewound"));
  all.Finish(absl::InternalError("later"));
  CHECK(IsRejoin(got));
  CHECK(got.message() == "the job was rewound");
}

}  // namespace
}  // namespace shardps
