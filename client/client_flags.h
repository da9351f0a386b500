// The flags every ShardPS client binary takes to reach a job (ps_worker,
// bench/emulated_worker): the servers, this worker's rank, the job view that
// must match the servers', timeouts, the wire and the job's TLS and token;
// and the ClientOptions they make.
#ifndef SHARDPS_CLIENT_CLIENT_FLAGS_H_
#define SHARDPS_CLIENT_CLIENT_FLAGS_H_

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "client/ps_client.h"

ABSL_DECLARE_FLAG(int, rank);

namespace shardps {

// ClientOptions from the flags (all but the layout, which the model gives).
// INVALID_ARGUMENT for no --servers or an unknown --mode or --wire_dtype;
// FAILED_PRECONDITION for an unreadable --auth_token_file.
absl::StatusOr<ClientOptions> ClientOptionsFromFlags();

}  // namespace shardps

#endif  // SHARDPS_CLIENT_CLIENT_FLAGS_H_
