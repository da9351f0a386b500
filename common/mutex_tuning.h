// Abseil's mutex deadlock detector, which Debian's Abseil runs on every
// lock and unlock (gRPC's locks too): it keeps a graph of which locks are
// held while others are taken, at about 56 ns per nested lock pair on the
// 2-core VM (83 against 27 ns), about 4 % of the CPU of a 16-worker job.
// Daemons, the benches and the C API's clients turn it off at start; tests,
// which never call this, keep it. SHARDPS_MUTEX_DEADLOCK_DETECTION=1 in the
// environment keeps it in a daemon too, to debug a lock order.
#ifndef SHARDPS_COMMON_MUTEX_TUNING_H_
#define SHARDPS_COMMON_MUTEX_TUNING_H_

namespace shardps {

// Returns whether detection is now off.
bool SkipMutexDeadlockDetection();

}  // namespace shardps

#endif  // SHARDPS_COMMON_MUTEX_TUNING_H_
