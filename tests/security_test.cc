// DESIGN.md "Security" over real gRPC on 127.0.0.1: TLS on every channel,
// mutual TLS, and the job token on every call (the admin RPC included). A
// client without the token, with a wrong one, or trusting another CA is
// refused, and the server keeps serving the others. Certificates come from
// deploy/make_certs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/health_server.h"
#include "proto/health.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

// A CA, a certificate for 127.0.0.1 and a token, made by deploy/make_certs.
std::string MakeCerts(const std::string& name) {
  const std::string dir = TempDir(name) + "/certs";
  const std::string command = RunfilePath("deploy/make_certs") + " --out=" + dir + " > /dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
  return dir;
}

ServerOptions AsyncJob(int workers) {
  ServerOptions o = SyncOptions(1, workers);
  o.job.mode = Mode::kAsync;
  return o;
}

HostOptions Secured(const std::string& certs, bool mutual) {
  HostOptions h;
  h.tls = TlsFiles{certs + "/127.0.0.1.pem", certs + "/127.0.0.1.key", certs + "/ca.pem", mutual};
  h.auth_token = ReadFile(certs + "/token");
  h.auth_token.erase(h.auth_token.find_last_not_of("\n") + 1);
  return h;
}

// Registers a client with `tls` and `token`; its status.
absl::Status Join(const TestCluster& cluster, int rank, const TlsFiles& tls, const std::string& token) {
  ClientOptions c = cluster.ClientFor(rank);
  c.tls = tls;
  c.auth_token = token;
  c.server_timeout = absl::Milliseconds(300);  // a refused handshake is retried like a down server
  auto client = PsClient::Connect(c);
  if (!client.ok()) return client.status();
  return (*client)->Register().status();
}

TEST_CASE("TLS and a job token: only a client with both is served, and the server serves on", "[security]") {
  const std::string certs = MakeCerts("tls"), other = MakeCerts("other-ca");
  const HostOptions host = Secured(certs, /*mutual=*/false);
  TestCluster cluster(AsyncJob(2), host);
  const TlsFiles trusting{"", "", certs + "/ca.pem", false};

  ClientOptions good_options = cluster.ClientFor(0);
  good_options.tls = trusting;
  good_options.auth_token = host.auth_token;
  auto good = PsClient::Connect(good_options);
  REQUIRE(good.ok());
  REQUIRE((*good)->Register().ok());
  REQUIRE((*good)->Init(Zeros(SmallLayout())).ok());

  const absl::Status no_token = Join(cluster, 1, trusting, "");
  REQUIRE(no_token.code() == absl::StatusCode::kUnauthenticated);
  REQUIRE_THAT(std::string(no_token.message()), Catch::Contains("does not carry the job token"));
  REQUIRE(Join(cluster, 1, trusting, "not-the-token").code() == absl::StatusCode::kUnauthenticated);
  const absl::Status other_ca = Join(cluster, 1, TlsFiles{"", "", other + "/ca.pem", false}, host.auth_token);
  INFO(other_ca.ToString());
  REQUIRE(other_ca.code() == absl::StatusCode::kUnavailable);  // the handshake fails
  REQUIRE(Join(cluster, 1, TlsFiles{}, host.auth_token).code() == absl::StatusCode::kUnavailable);  // plaintext

  REQUIRE(cluster.core(0)->Stats().unauthenticated == 2);
  auto g = Filled(1), w = Zeros(SmallLayout());
  REQUIRE(PushAll(**good, 0, g).ok());  // still serving the good client
  REQUIRE(PullAll(**good, 1, w).ok());
  REQUIRE(AllEqual(w, -0.5f));  // lr 1 / 2 workers
}

TEST_CASE("mutual TLS: a client must present a certificate the job's CA signed", "[security]") {
  const std::string certs = MakeCerts("mutual"), other = MakeCerts("mutual-other");
  const HostOptions host = Secured(certs, /*mutual=*/true);
  TestCluster cluster(AsyncJob(1), host);
  const std::string ca = certs + "/ca.pem";
  REQUIRE(Join(cluster, 0, TlsFiles{certs + "/worker.pem", certs + "/worker.key", ca, true}, host.auth_token).ok());
  REQUIRE(Join(cluster, 0, TlsFiles{"", "", ca, false}, host.auth_token).code() == absl::StatusCode::kUnavailable);
  REQUIRE(Join(cluster, 0, TlsFiles{other + "/worker.pem", other + "/worker.key", ca, true}, host.auth_token).code() ==
          absl::StatusCode::kUnavailable);
  // Unreadable TLS files are named at Connect.
  ClientOptions c = cluster.ClientFor(0);
  c.tls = TlsFiles{certs + "/nope.pem", certs + "/worker.key", ca, true};
  const absl::Status missing = PsClient::Connect(c).status();
  REQUIRE(missing.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(missing.message()), Catch::Contains("nope.pem"));
}

TEST_CASE("the admin RPC needs the job token too", "[security]") {
  ServerOptions o = AsyncJob(1);
  HostOptions host;
  host.auth_token = "sesame";
  TestCluster cluster(o, host);
  auto stub = cluster.RawStub(0);
  wire::AdminRequest req;
  req.set_action(wire::ADMIN_STATUS);
  wire::AdminResponse resp;
  grpc::ClientContext without;
  REQUIRE(stub->Admin(&without, req, &resp).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext with;
  with.AddMetadata(kAuthorizationKey, std::string(kBearerPrefix) + "sesame");
  REQUIRE(stub->Admin(&with, req, &resp).ok());
  REQUIRE(cluster.core(0)->Stats().unauthenticated == 1);
}

// The health service's answer for the whole server at `address`, in plaintext.
grpc::Status CheckHealth(const std::string& address, grpc::health::v1::HealthCheckResponse* response) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub->Check(&context, grpc::health::v1::HealthCheckRequest(), response);
}

TEST_CASE("the health port answers probes in plaintext, with no token, and serves nothing else", "[security]") {
  const std::string certs = MakeCerts("health");
  HostOptions host = Secured(certs, /*mutual=*/true);
  host.health_port = 0;
  TestCluster cluster(AsyncJob(1), host);
  const int health_port = cluster.host(0)->health_port();
  REQUIRE(health_port > 0);
  REQUIRE(health_port != cluster.host(0)->port());
  const std::string health_address = absl::StrCat("127.0.0.1:", health_port);

  grpc::health::v1::HealthCheckResponse response;
  REQUIRE(CheckHealth(health_address, &response).ok());
  REQUIRE(response.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  // The main port still speaks only TLS.
  REQUIRE(CheckHealth(cluster.Addresses()[0], &response).error_code() == grpc::StatusCode::UNAVAILABLE);
  // The parameter service is not on the health port.
  auto stub = wire::ParameterService::NewStub(grpc::CreateChannel(health_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  wire::AdminRequest request;
  request.set_action(wire::ADMIN_STATUS);
  wire::AdminResponse admin;
  REQUIRE(stub->Admin(&context, request, &admin).error_code() == grpc::StatusCode::UNIMPLEMENTED);

  cluster.host(0)->Shutdown();
  REQUIRE(CheckHealth(health_address, &response).error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("a health server says NOT_SERVING once its daemon is stopping", "[security]") {
  auto health = HealthServer::Start("127.0.0.1", 0);
  REQUIRE(health.ok());
  const std::string address = absl::StrCat("127.0.0.1:", (*health)->port());
  grpc::health::v1::HealthCheckResponse response;
  REQUIRE(CheckHealth(address, &response).ok());
  REQUIRE(response.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  (*health)->SetNotServing();
  REQUIRE(CheckHealth(address, &response).ok());
  REQUIRE(response.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST_CASE("the health port is off unless asked for, and a busy one is named", "[security]") {
  TestCluster plain(AsyncJob(1));
  REQUIRE(plain.host(0)->health_port() == -1);
  HostOptions busy;
  busy.health_port = plain.host(0)->port();
  REQUIRE_THROWS_WITH(TestCluster(AsyncJob(1), busy),
                      Catch::Contains(absl::StrCat("port ", busy.health_port, ": Address already in use")));
}

TEST_CASE("tokens: compared whole, read from a file, an empty one refused", "[security]") {
  REQUIRE(TokenMatches("Bearer abc", "abc"));
  REQUIRE(!TokenMatches("Bearer abd", "abc"));
  REQUIRE(!TokenMatches("Bearer abcd", "abc"));
  REQUIRE(!TokenMatches("Bearer ab", "abc"));
  REQUIRE(!TokenMatches("abc", "abc"));
  REQUIRE(!TokenMatches("Bearer ", ""));
  const std::string dir = TempDir("tokens");
  std::ofstream(dir + "/token") << "  s3cret\n";
  std::ofstream(dir + "/empty") << "\n";
  REQUIRE(ReadAuthToken(dir + "/token").value() == "s3cret");
  REQUIRE(ReadAuthToken(dir + "/empty").status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(ReadAuthToken(dir + "/none").status().message()), Catch::Contains(dir + "/none"));
  REQUIRE(ReadAuthToken("").value().empty());
}

}  // namespace
}  // namespace shardps::testing
