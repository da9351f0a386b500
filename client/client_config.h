// ClientOptions from text, for clients that are not ShardPS binaries (the C
// API, and through it Python): the same options ps_worker takes as flags,
// `--name=value` words separated by spaces or newlines (a double-quoted part
// keeps its spaces: `--flagfile="/a dir/job.flags"`), and `--flagfile=PATH`
// to read a job's flag file, one option a line as absl reads one. Options a job file holds for
// other processes (servers' optimizer flags, ps_worker's model flags) are
// ignored there, as every ShardPS process ignores the flags that are not its
// own; an unknown option given directly is an error. Reads no global flags.
//
// Options: servers, rank, num_workers, mode, staleness, partition_bytes,
// wire_dtype, channels_per_server, in_flight_bytes, push_request_bytes,
// fetch_request_bytes, coalesce_pushes, push_timeout,
// pull_timeout, server_timeout, heartbeat_interval (durations as "30s",
// "500ms" or seconds), tls_ca, tls_cert, tls_key, tls_mutual,
// auth_token_file, flagfile.
#ifndef SHARDPS_CLIENT_CLIENT_CONFIG_H_
#define SHARDPS_CLIENT_CLIENT_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/ps_client.h"

namespace shardps {

// All of ClientOptions but the layout. INVALID_ARGUMENT naming the option
// for an unknown one, a bad value, or no servers; FAILED_PRECONDITION for a
// flag file or token file that cannot be read.
absl::StatusOr<ClientOptions> ClientOptionsFromText(const std::string& text);

}  // namespace shardps

#endif  // SHARDPS_CLIENT_CLIENT_CONFIG_H_
