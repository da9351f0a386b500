// Collects the answers of several calls and runs `done` once, after the last,
// with the error the keep rule kept (by default the first). Shared by the
// calls' callbacks, which keep it alive. The client's Fanout prefers a rejoin
// status (client/grpc_ps_client.h); a server's replica link keeps the first.
#ifndef SHARDPS_COMMON_FANOUT_H_
#define SHARDPS_COMMON_FANOUT_H_

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace shardps {

class CallFanout {
 public:
  // Folds one answer's status into the one kept so far.
  using KeepRule = void (*)(absl::Status& kept, const absl::Status& status);
  static void KeepFirst(absl::Status& kept, const absl::Status& status) {
    if (kept.ok()) kept = status;
  }

  CallFanout(int calls, std::function<void(absl::Status)> done, KeepRule keep = KeepFirst)
      : remaining_(calls), keep_(keep), done_(std::move(done)) {}

  void Finish(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      keep_(kept_, status);
      if (--remaining_ > 0) return;
    }
    done_(kept_);
  }

 private:
  absl::Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_);
  absl::Status kept_;  // written under mu_, read after the last Finish
  const KeepRule keep_;
  const std::function<void(absl::Status)> done_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_FANOUT_H_
