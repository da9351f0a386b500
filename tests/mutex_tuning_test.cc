// common/mutex_tuning: daemons turn Abseil's mutex deadlock detector off,
// unless SHARDPS_MUTEX_DEADLOCK_DETECTION=1 keeps it. Observed from the
// outside: a lock-order inversion is reported on stderr while the detector
// runs, and not once it is off.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "absl/synchronization/mutex.h"
#include "common/mutex_tuning.h"
#include "temp_dir.h"

namespace {

// Takes a then b, then b then a (one thread: no real deadlock), with
// stderr sent to a file; returns what was written there.
std::string StderrOfAnInversion(const std::string& path) {
  absl::Mutex a, b;
  fflush(stderr);
  const int saved = dup(2);
  const int file = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  dup2(file, 2);
  {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  }
  {
    absl::MutexLock first(&b);
    absl::MutexLock second(&a);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(file);
  close(saved);
  return shardps::testing::ReadFile(path);
}

}  // namespace

TEST_CASE("the detector reports an inversion until SkipMutexDeadlockDetection turns it off") {
  const std::string log = shardps::testing::TempDir("mutex_tuning") + "/stderr.txt";
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kReport);
  REQUIRE(StderrOfAnInversion(log).find("Potential Mutex deadlock") != std::string::npos);

  setenv("SHARDPS_MUTEX_DEADLOCK_DETECTION", "1", 1);
  CHECK_FALSE(shardps::SkipMutexDeadlockDetection());
  CHECK(StderrOfAnInversion(log).find("Potential Mutex deadlock") != std::string::npos);

  unsetenv("SHARDPS_MUTEX_DEADLOCK_DETECTION");
  CHECK(shardps::SkipMutexDeadlockDetection());
  CHECK(StderrOfAnInversion(log).empty());
}
