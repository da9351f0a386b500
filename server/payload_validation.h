// Checks of what a worker sends before any of it touches a key: the key is
// this server's, the payload has the right size, a dtype the server takes,
// and only finite values, and every step it names is in range.
#ifndef SHARDPS_SERVER_PAYLOAD_VALIDATION_H_
#define SHARDPS_SERVER_PAYLOAD_VALIDATION_H_

#include <cstdint>

#include <vector>

#include "absl/status/status.h"

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

// The largest step, version or timeline a request may name. Servers and
// clients add to what they are sent (the next step, a staleness, a
// timeline one past): a bound far below INT64_MAX keeps each sum from
// overflowing, and no job comes near it (at a million steps a second,
// 146,000 years). A registration that resumed at INT64_MAX once put every
// later worker at that step and the next pull at INT64_MIN
// (tests:wire_fuzz_test found it).
inline constexpr int64_t kMaxWireStep = int64_t{1} << 62;
inline bool InWireStepRange(int64_t value) { return value >= 0 && value <= kMaxWireStep; }
// INVALID_ARGUMENT "<what> is <value>; want 0 to 2^62" unless `value` is in
// [0, kMaxWireStep].
absl::Status CheckWireStep(const char* what, int64_t value);
// A replica's version and the step of each worker's last push it includes
// (-1: none yet): each in range.
absl::Status CheckReplicaSteps(int64_t version, const std::vector<int64_t>& last_pushed_step);

}  // namespace shardps

#endif  // SHARDPS_SERVER_PAYLOAD_VALIDATION_H_
