// A ServerView (common/replica_map.h) shared by a process's threads: the
// server core's and the worker's view of the job's servers.
//
// Reads take no lock: they run for every key a push or pull names. Each
// server's generation is an atomic, so a read during a merge may mix
// generations from before and after it; that mix is itself a view merges
// could have produced (each generation only grows, and merges commute).
// Merges and edits are serialised.
#ifndef SHARDPS_COMMON_SHARED_SERVER_VIEW_H_
#define SHARDPS_COMMON_SHARED_SERVER_VIEW_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/replica_map.h"

namespace shardps {

class SharedServerView {
 public:
  // The view now.
  ServerView Load() const {
    ServerView v;
    const int used = used_.load(std::memory_order_acquire);
    for (int s = 0; s < used; ++s) v.gen_[s] = gen_[s].load(std::memory_order_relaxed);
    return v;
  }
  // Nothing has happened: every server is live at generation 0.
  bool Pristine() const { return used_.load(std::memory_order_acquire) == 0; }

  struct Change {
    ServerView before, now;
    std::vector<int> rose;  // the servers whose generation rose
  };
  // Takes the larger generation per server.
  Change Merge(const ServerView& incoming) {
    absl::MutexLock lock(&mu_);
    Change c;
    c.before = Load();
    c.now = c.before;
    c.rose = c.now.Merge(incoming);
    if (!c.rose.empty()) Store(c.now);
    return c;
  }
  // Applies `edit` (MarkJoining, MarkLive, ...); returns the view after.
  ServerView Edit(const std::function<void(ServerView&)>& edit) {
    absl::MutexLock lock(&mu_);
    ServerView v = Load();
    edit(v);
    Store(v);
    return v;
  }

 private:
  void Store(const ServerView& v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int used = 0;
    for (int s = 0; s < kMaxReplicatedServers; ++s) {
      gen_[s].store(v.gen_[s], std::memory_order_relaxed);
      if (v.gen_[s] != 0) used = s + 1;
    }
    // Generations only grow, so `used` never shrinks; the release publishes them.
    used_.store(std::max(used, used_.load(std::memory_order_relaxed)), std::memory_order_release);
  }

  absl::Mutex mu_;
  std::array<std::atomic<uint32_t>, kMaxReplicatedServers> gen_{};
  std::atomic<int> used_{0};  // 1 + the highest id with a non-zero generation
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_SHARED_SERVER_VIEW_H_
