// Keeps freed memory in the process instead of returning it to the kernel,
// so that the large buffers of pushes and pulls are reused rather than
// page-faulted in afresh on every call (page faults are expensive on the
// VMs ShardPS runs on). Daemons call it once at start.
#ifndef SHARDPS_COMMON_MALLOC_TUNING_H_
#define SHARDPS_COMMON_MALLOC_TUNING_H_

namespace shardps {

void KeepFreedMemoryForReuse();

}  // namespace shardps

#endif  // SHARDPS_COMMON_MALLOC_TUNING_H_
