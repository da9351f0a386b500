// The client's options from text (client/client_config.h), as the C API and
// Python give them: words on a line, a double-quoted part keeping its spaces,
// and a job's flag file read a flag a line, as absl reads one.
#include "client/client_config.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/temp_dir.h"

namespace shardps {
namespace {

using testing::TempDir;

// A job flag file in a directory whose name holds a space.
std::string JobFileWithSpaces(const std::string& text) {
  const std::string dir = TempDir("client config dir");
  const std::string path = dir + "/job.flags";
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("client options: words split on spaces and newlines", "[client_config]") {
  absl::StatusOr<ClientOptions> o = ClientOptionsFromText("--servers=a:1,b:2 --rank=1\n--num_workers=3  --mode=ssp");
  REQUIRE(o.ok());
  CHECK(o->servers.size() == 2);
  CHECK(o->rank == 1);
  CHECK(o->job.num_workers == 3);
  CHECK(o->job.mode == Mode::kSsp);
}

TEST_CASE("client options: a quoted flag file path keeps its spaces, and so do the file's values", "[client_config]") {
  const std::string path =
      JobFileWithSpaces("--mode=async\n  --tls_ca=/certs dir/ca.pem\n# a comment\n\n--optimizer=adam\n");
  absl::StatusOr<ClientOptions> o = ClientOptionsFromText(absl::StrCat("--flagfile=\"", path, "\" --servers=a:1"));
  REQUIRE(o.ok());
  CHECK(o->job.mode == Mode::kAsync);
  CHECK(o->tls.ca == "/certs dir/ca.pem");
  // A quote may sit anywhere in a word.
  o = ClientOptionsFromText(absl::StrCat("\"--flagfile=", path, "\" --servers=a:1"));
  REQUIRE(o.ok());
  CHECK(o->job.mode == Mode::kAsync);
}

TEST_CASE("client options: an unclosed quote and an unquoted path with spaces are refused", "[client_config]") {
  const std::string path = JobFileWithSpaces("--mode=async\n");
  absl::StatusOr<ClientOptions> o = ClientOptionsFromText(absl::StrCat("--flagfile=\"", path, " --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("is not closed"));
  o = ClientOptionsFromText(absl::StrCat("--flagfile=", path, " --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kFailedPrecondition);  // the path cut at its space
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("cannot read the flag file"));
}

TEST_CASE("client options: a flag file line is one flag, trailing spaces and all, as absl reads it",
          "[client_config]") {
  // ps_server and ps_worker read "--mode=async --staleness=3" as a mode of
  // "async --staleness=3"; so does the client, and refuses it.
  const std::string path = JobFileWithSpaces("--mode=async --staleness=3\n");
  absl::StatusOr<ClientOptions> o = ClientOptionsFromText(absl::StrCat("--flagfile=\"", path, "\" --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("async --staleness=3"));
  // Leading spaces go, trailing ones stay (a CRLF file's '\r' too), as in absl.
  const std::string trailing = JobFileWithSpaces("   --mode=async \n");
  o = ClientOptionsFromText(absl::StrCat("--flagfile=\"", trailing, "\" --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("unknown mode 'async '"));
}

TEST_CASE("client options: a --flagfile value names files separated by commas, read in order, as absl reads it",
          "[client_config]") {
  const std::string dir = TempDir("client config list");
  const std::string first = dir + "/first.flags", second = dir + "/second.flags";
  std::ofstream(first) << "--mode=async\n--rank=2\n";
  std::ofstream(second) << "--mode=ssp\n--staleness=3\n";
  absl::StatusOr<ClientOptions> o =
      ClientOptionsFromText(absl::StrCat("\"--flagfile=", first, ",", second, "\" --servers=a:1"));
  REQUIRE(o.ok());
  CHECK(o->job.mode == Mode::kSsp);  // the later file wins
  CHECK(o->job.staleness == 3);
  CHECK(o->rank == 2);
  // An empty name, as absl refuses it.
  o = ClientOptionsFromText(absl::StrCat("\"--flagfile=", first, ",\" --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("names an empty file"));
  // One that cannot be read stops the rest, naming it.
  o = ClientOptionsFromText(absl::StrCat("\"--flagfile=", first, ",/nonexistent/job.flags\" --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("/nonexistent/job.flags"));
}

TEST_CASE("client options: flag files that name each other in a loop are refused, not followed forever",
          "[client_config]") {
  const std::string dir = TempDir("client config loop");
  const std::string path = dir + "/job.flags";
  std::ofstream(path) << "--mode=async\n--flagfile=" << path << "\n";
  absl::StatusOr<ClientOptions> o = ClientOptionsFromText(absl::StrCat("\"--flagfile=", path, "\" --servers=a:1"));
  CHECK(o.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(o.status().message()), Catch::Contains("nest deeper than 4"));
}

}  // namespace
}  // namespace shardps
