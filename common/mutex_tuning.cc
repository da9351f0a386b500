#include "common/mutex_tuning.h"

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace shardps {

bool SkipMutexDeadlockDetection() {
  const char* keep = std::getenv("SHARDPS_MUTEX_DEADLOCK_DETECTION");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return false;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}

}  // namespace shardps
