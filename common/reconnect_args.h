// gRPC channel arguments for re-dialling a server that went away: the first
// retry after 100 ms (the least gRPC takes), later ones at most a quarter
// second apart (gRPC's own backoff grows to two minutes), so a restarted
// server is found as soon as our retries look for it.
//
// And a connect timeout of kConnectTimeout. gRPC names its minimum connect
// timeout GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, and an attempt's deadline is the
// later of that and the next retry. Setting it to a backoff (100 ms, as these
// channels did until 2026-11-27) dropped every connection whose TCP and
// HTTP/2 handshake took longer than 100-250 ms: a link with a long round trip,
// a TLS handshake on a busy host, or one server dialled by 31 workers at once
// while it ran slowly (under valgrind) never got connected
// (tests/chaos:slow_link_test: 0.6 s handshakes).
#ifndef SHARDPS_COMMON_RECONNECT_ARGS_H_
#define SHARDPS_COMMON_RECONNECT_ARGS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardps {

// Long enough for a handshake of a few round trips on a slow link or a
// loaded host. Not longer to start with: with 5 s the chaos suite's
// kill-rejoin-kill case (tests/chaos:replication_chaos_test, the second
// kill as soon as the first server is live again) failed in 3 of 9 runs,
// against 0 of 8 with the old 100 ms, 2026-11-27; why was not found
// (docs/failures.md), and at 6b78f75 the same cases passed 6 of 6 runs
// with 5 s. A worker lengthens its own timeout where handshakes need it.
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(1);

// A worker whose calls to a server keep failing because its handshakes
// time out (gRPC says so; a refused connection does not count), for
// kConnectAttemptsBeforeLonger of its connect timeouts, gives its channels
// a timeout twice as long, up to kMaxConnectTimeout (gRPC's own default), so
// a handshake slower than kConnectTimeout completes in the end instead of
// never (client/server_connection.cc). A rejoining server starts again
// from kConnectTimeout. The server-to-server links (the backup link, a
// joiner's copy) keep theirs fixed, kConnectTimeout unless ps_server
// --peer_connect_timeout says otherwise: a link that lengthened its timeout
// by itself would take longer than --server_timeout_for_failover to find
// a dead backup.
inline constexpr int kConnectAttemptsBeforeLonger = 3;
inline constexpr absl::Duration kMaxConnectTimeout = absl::Seconds(20);

// A server's connect timeout to the other servers (ps_server
// --peer_connect_timeout): INVALID_ARGUMENT unless within (0, kMaxConnectTimeout].
absl::Status CheckPeerConnectTimeout(absl::Duration timeout);

// The connect timeout after `timeout` proved too short.
absl::Duration LongerConnectTimeout(absl::Duration timeout);

std::vector<std::pair<std::string, int>> ReconnectArgs(absl::Duration connect_timeout = kConnectTimeout);

}  // namespace shardps

#endif  // SHARDPS_COMMON_RECONNECT_ARGS_H_
