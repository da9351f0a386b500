// Replication: a server's view of the job's servers (common/replica_map.h)
// and the servers that joined at a new address (common/moved_servers.h), and
// a step announced for a checkpoint by time (server/shard_checkpointer.h), as
// the metadata of its calls and answers (common/rpc_metadata.h). Shared by
// the service (requests in, answers out), the replica link and the joiner.
#ifndef SHARDPS_SERVER_VIEW_METADATA_H_
#define SHARDPS_SERVER_VIEW_METADATA_H_

#include "common/replica_map.h"
#include "common/rpc_metadata.h"
#include "server/parameter_server.h"

namespace shardps {

// (key, value) pairs to send: none while nothing happened to any server.
MetadataPairs ViewMetadata(const ParameterServer& core);

// Merges what `metadata` carries into `core`: the moves first, so that a
// server the view shows joining is reached where it is now, then the view
// (into `view` instead, when given), and an announced checkpoint step. Text
// that does not parse is ignored.
void NoteViewMetadata(const ReceivedMetadata& metadata, ParameterServer& core, ServerView* view = nullptr);

}  // namespace shardps

#endif  // SHARDPS_SERVER_VIEW_METADATA_H_
