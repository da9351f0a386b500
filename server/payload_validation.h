// Checks of what a worker sends before any of it touches a key: the key is
// this server's, and the payload has the right size, a dtype the server
// takes, and only finite values.
#ifndef SHARDPS_SERVER_PAYLOAD_VALIDATION_H_
#define SHARDPS_SERVER_PAYLOAD_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include <vector>

#include "common/key_partition.h"
#include "server/payload_blocks.h"

namespace shardps {

// OK when `server` owns `key` in `map`; NOT_FOUND naming the key otherwise.
absl::Status CheckOwned(const KeyMap& map, const ChunkKey& key, int server);
// The same for a server holding the keys of the primaries `held` (itself
// first; its backups' primaries after it, with replication).
absl::Status CheckHeld(const KeyMap& map, const ChunkKey& key, int server, const std::vector<int>& held);

// INVALID_ARGUMENT unless `chunk` holds `length` finite values in an
// encoding the server takes: float32 always, bfloat16 when
// `bfloat16_allowed` (gradients; initial values are float32 only).
// `what` names the payload in the message ("gradient", "initial value").
absl::Status ValidatePayload(const char* what, const ChunkPayload& chunk, int64_t length, bool bfloat16_allowed);

}  // namespace shardps

#endif  // SHARDPS_SERVER_PAYLOAD_VALIDATION_H_
