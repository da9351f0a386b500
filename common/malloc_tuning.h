// Keeps freed memory in the process instead of returning it to the kernel,
// in at most 4 malloc arenas (fewer arenas hold less idle memory each),
// so that the large buffers of pushes and pulls are reused rather than
// page-faulted in afresh on every call (page faults are expensive on the
// VMs ShardPS runs on). Daemons call it once at start.
#ifndef SHARDPS_COMMON_MALLOC_TUNING_H_
#define SHARDPS_COMMON_MALLOC_TUNING_H_

#include <cstdint>

namespace shardps {

void KeepFreedMemoryForReuse();

// Bytes the process's malloc has handed out and not had back (all arenas):
// memory in use, as opposed to RSS, which also holds freed memory kept for
// reuse. A leak grows this; a high-water mark only grows RSS.
int64_t HeapBytesInUse();

}  // namespace shardps

#endif  // SHARDPS_COMMON_MALLOC_TUNING_H_
