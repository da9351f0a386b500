// shardps_admin: status, checkpoints and stopping for every server of a job.
//
//   shardps_admin status|checkpoint|stop --servers=h0:p0,h1:p1 [--flagfile=job.flags]
//
// For each server it prints its id, address, incarnation, mode, step (the
// smallest and largest key version), live workers, keys and bytes held,
// timeline, last checkpoint and whether it awaits a rewind. `checkpoint`
// writes a checkpoint on each first, `stop` stops each as SIGTERM would. The
// job's TLS and token flags (--tls_ca, --tls_cert, --tls_key, --tls_mutual,
// --auth_token_file) are read as ps_worker reads them. Exits 1 if any server
// failed to answer.
#include <cstdio>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "common/job_view.h"
#include "common/rpc_metadata.h"
#include "common/security.h"
#include "proto/shardps.grpc.pb.h"

ABSL_FLAG(std::string, servers, "", "Comma-separated host:port of every server, in server-id order.");
ABSL_FLAG(std::string, tls_ca, "", "The CA of the servers' certificates: TLS.");
ABSL_FLAG(std::string, tls_cert, "", "With --tls_mutual: a client certificate.");
ABSL_FLAG(std::string, tls_key, "", "With --tls_mutual: its private key.");
ABSL_FLAG(bool, tls_mutual, false, "Present --tls_cert.");
ABSL_FLAG(std::string, auth_token_file, "", "The job token file.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of each call.");

namespace shardps {
namespace {

std::string Row(int s, const std::string& address, const wire::AdminResponse& resp) {
  const wire::ServerStatus& st = resp.status();
  std::string checkpoints;
  for (int64_t c : st.checkpoint_steps()) checkpoints += absl::StrCat(checkpoints.empty() ? "" : ",", c);
  return absl::StrCat(s, "\t", address, "\t", IncarnationText(st.incarnation()), "\t",
                      wire::Mode_Name(st.mode()).substr(5), "\t", st.min_version(), "..", st.max_version(), "\t",
                      st.live_workers(), "\t", st.num_keys(), "\t", st.owned_bytes(), "\t", st.timeline(), "\t",
                      st.checkpoint_step(), " [", checkpoints, "]\t", st.awaiting_rewind() ? "yes" : "no",
                      resp.checkpoint_path().empty() ? "" : absl::StrCat("\twrote ", resp.checkpoint_path()));
}

int Run(const std::string& command) {
  wire::AdminRequest req;
  if (command == "status") req.set_action(wire::ADMIN_STATUS);
  if (command == "checkpoint") req.set_action(wire::ADMIN_CHECKPOINT_NOW);
  if (command == "stop") req.set_action(wire::ADMIN_STOP);
  const std::vector<std::string> servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (req.action() == wire::ADMIN_ACTION_UNSPECIFIED || servers.empty()) {
    fprintf(stderr, "usage: shardps_admin status|checkpoint|stop --servers=h0:p0,h1:p1 [--flagfile=job.flags]\n");
    return 2;
  }
  auto credentials = MakeChannelCredentials(TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                                     absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_mutual)});
  absl::StatusOr<std::string> token = ReadAuthToken(absl::GetFlag(FLAGS_auth_token_file));
  for (const absl::Status& s : {credentials.status(), token.status()}) {
    if (!s.ok()) {
      fprintf(stderr, "shardps_admin: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  printf("server\taddress\tincarnation\tmode\tversions\tlive_workers\tkeys\tbytes\ttimeline\tcheckpoint\tawaiting_rewind\n");
  int failed = 0;
  for (size_t s = 0; s < servers.size(); ++s) {
    auto stub = wire::ParameterService::NewStub(grpc::CreateChannel(servers[s], *credentials));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_timeout)));
    if (!token->empty()) ctx.AddMetadata(kAuthorizationKey, kBearerPrefix + *token);
    wire::AdminResponse resp;
    const grpc::Status status = stub->Admin(&ctx, req, &resp);
    if (status.ok()) {
      printf("%s\n", Row(static_cast<int>(s), servers[s], resp).c_str());
    } else {
      ++failed;
      printf("%zu\t%s\terror: %s\n", s, servers[s].c_str(), status.error_message().c_str());
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  std::vector<char*> args = shardps::ParseJobCommandLine(
      argc, argv, "shardps_admin status|checkpoint|stop --servers=h0:p0,h1:p1 [--flagfile=job.flags]",
      shardps::ForeignFlags::kAnyName);
  return shardps::Run(args.size() == 2 ? args[1] : "");
}
