#include "client/client_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/key_partition.h"
#include "common/security.h"
#include "common/tcp_congestion.h"
#include "common/wire_dtype.h"

ABSL_FLAG(std::string, servers, "", "Comma-separated host:port of every server, in server-id order.");
ABSL_FLAG(int, rank, 0, "This worker's rank in [0, num_workers).");
ABSL_FLAG(int, num_workers, 1, "Workers in the job.");
ABSL_FLAG(std::string, mode, "sync", "sync, async or ssp; must match the servers.");
ABSL_FLAG(int, staleness, 0, "ssp staleness; must match the servers.");
ABSL_FLAG(int64_t, partition_bytes, shardps::kDefaultPartitionBytes, "Largest chunk in bytes; must match the servers.");
ABSL_FLAG(int, replicas, 1, "Copies of every key on the servers; must match the servers.");
ABSL_FLAG(absl::Duration, server_timeout_for_failover, absl::Seconds(3),
          "With --replicas > 1: a server silent this long is taken for failed, and its keys are served by their "
          "backup (a refused connection fails over at once).");
ABSL_FLAG(absl::Duration, pull_timeout, absl::Seconds(120), "Deadline of one pull (sync pulls wait for the slowest).");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(2), "Heartbeat when idle this long.");
ABSL_FLAG(int, channels_per_server, 2,
          "gRPC channels (TCP connections) to each server; a layer's chunks for a server are spread over them.");
ABSL_FLAG(int64_t, in_flight_bytes, 0,
          "Bytes of pushes (and, apart, of fetched weights) in flight at once; the rest queue in the transfer "
          "schedule's order, earliest layer first (0: automatic, 512 KB of pushes and 256 KB of fetched weights, and "
          "two requests' bytes at least: 2 MB of pushes with the default --push_request_bytes; with "
          "--first_weights_lane, in sync, no limit on fetched weights; -1: no limit).");
ABSL_FLAG(int64_t, push_request_bytes, shardps::kDefaultPushRequestBytes,
          "The most bytes of one server's chunks of a push that share a request (fewer calls; a partition at least, "
          "0: one partition; half of --in_flight_bytes at most when that is set; keep it under the servers' "
          "--max_message_bytes).");
ABSL_FLAG(bool, coalesce_pushes, true,
          "While a push to a server is in flight, the step's later pushes to it wait and leave together as one "
          "request, up to --push_request_bytes: a worker's requests per step stay flat as N grows (false: each "
          "call's keys for a server are a request of their own).");
ABSL_FLAG(bool, first_weights_lane, false,
          "One more connection to each server for the awaits and the fetches of the first 4% of the model's bytes "
          "(what the next forward pass waits for first), which the server lifts out of the bulk band; later weights "
          "are fetched with no window (unless --in_flight_bytes is set). Sync only (async and ssp ignore it); for "
          "dense models with servers on hosts of their own and --channels_per_server of 2 or more "
          "(docs/performance.md, \"The first-weights lane\").");
ABSL_FLAG(int64_t, fetch_request_bytes, 0,
          "The most bytes of one server's chunks of a pull that share a request (0: one partition; more is faster "
          "for big tensors on fast links, and queues the weights the next forward pass waits for behind more bytes).");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "Encoding of gradients and weights on the wire: float32, or bfloat16 (half the bytes; values rounded "
          "to 8 significant bits on the wire, the servers keep float32).");
ABSL_FLAG(absl::Duration, server_timeout, absl::Minutes(5),
          "How long to wait for a server that does not answer (down, restarting, paused, cut off) before "
          "exiting with an error naming it; the wait is logged every 10 s.");
ABSL_FLAG(bool, async_prefetch, false,
          "async and ssp: fetch the next step's weights as the backward pass begins (the servers' latest then, "
          "without this worker's gradients of the step: faster where links are busy, one more step of staleness "
          "for its own gradients; ssp's bound on the other workers holds); false: each tensor is fetched once its push is "
          "acknowledged (read-your-writes). sync ignores it.");
ABSL_FLAG(bool, pull_with_push, false,
          "async and ssp: each tensor's pull for the next step leaves with its push and the server answers it once "
          "the push is applied (read-your-writes, no round trip between them: faster where links are busy, but the "
          "weights hold fewer of the other workers' pushes, which costs accuracy; see README \"Scaling\"). sync "
          "ignores it.");
ABSL_FLAG(bool, http2_bdp_probe, true,
          "gRPC's bandwidth-delay probe on this worker's connections: a PING per burst of data received, to grow "
          "the window. Off saves CPU with many servers (N = 32: a sixth of a worker's CPU a step); on moves bulk "
          "tensors faster over few connections (docs/performance.md).");
ABSL_FLAG(std::string, tcp_congestion, shardps::kDefaultTcpCongestion,
          "TCP congestion control of this worker's connections to the servers (cubic, reno, bbr, ... as the kernel "
          "allows; system: the machine's default; auto: cubic where this process may set it, else the machine's). "
          "On the emulated cluster CUBIC beats BBR at 8 workers (README \"Scaling\").");
ABSL_FLAG(std::string, tls_ca, "", "PEM certificate of the CA that signs the servers' certificates: TLS on every channel.");
ABSL_FLAG(std::string, tls_cert, "", "With --tls_mutual: this worker's PEM certificate.");
ABSL_FLAG(std::string, tls_key, "", "With --tls_mutual: the private key of --tls_cert.");
ABSL_FLAG(bool, tls_mutual, false, "Present --tls_cert to servers that require client certificates.");
ABSL_FLAG(std::string, auth_token_file, "", "A file holding the job token, sent on every call. Empty: none.");

namespace shardps {

absl::StatusOr<ClientOptions> ClientOptionsFromFlags() {
  ClientOptions o;
  o.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  if (o.servers.empty()) return absl::InvalidArgumentError("--servers is empty");
  o.rank = absl::GetFlag(FLAGS_rank);
  absl::StatusOr<Mode> mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  o.job.mode = *mode;
  o.job.staleness = absl::GetFlag(FLAGS_staleness);
  o.job.num_servers = static_cast<int>(o.servers.size());
  o.job.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.job.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  o.job.replicas = absl::GetFlag(FLAGS_replicas);
  o.failover_timeout = absl::GetFlag(FLAGS_server_timeout_for_failover);
  o.pull_timeout = absl::GetFlag(FLAGS_pull_timeout);
  o.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  o.server_timeout = absl::GetFlag(FLAGS_server_timeout);
  o.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  o.in_flight_bytes = absl::GetFlag(FLAGS_in_flight_bytes);
  o.push_request_bytes = absl::GetFlag(FLAGS_push_request_bytes);
  o.coalesce_pushes = absl::GetFlag(FLAGS_coalesce_pushes);
  o.first_weights_lane = absl::GetFlag(FLAGS_first_weights_lane);
  o.fetch_request_bytes = absl::GetFlag(FLAGS_fetch_request_bytes);
  o.async_prefetch = absl::GetFlag(FLAGS_async_prefetch);
  o.pull_with_push = absl::GetFlag(FLAGS_pull_with_push);
  o.tcp_congestion = absl::GetFlag(FLAGS_tcp_congestion);
  o.http2_bdp_probe = absl::GetFlag(FLAGS_http2_bdp_probe);
  absl::StatusOr<wire::DType> wire_dtype = ParseWireDType(absl::GetFlag(FLAGS_wire_dtype));
  if (!wire_dtype.ok()) return wire_dtype.status();
  o.wire_dtype = *wire_dtype;
  o.tls = TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca),
                   absl::GetFlag(FLAGS_tls_mutual)};
  absl::StatusOr<std::string> token = ReadAuthToken(absl::GetFlag(FLAGS_auth_token_file));
  if (!token.ok()) return token.status();
  o.auth_token = *token;
  return o;
}

}  // namespace shardps
