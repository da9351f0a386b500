// Internal to server/sparse/sparse_store*.cc: the state SparseStore keeps
// per table (its rows, its sync step under way, its checkpoint capture and
// its counters).
#ifndef SHARDPS_SERVER_SPARSE_TABLE_STATE_H_
#define SHARDPS_SERVER_SPARSE_TABLE_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/sparse/sparse_store.h"
#include "server/sparse/sparse_table.h"

namespace shardps {

inline constexpr int kPullSizeBuckets = 11;

// sync: how many steps past a table's own a push may name. A worker sends
// its table pushes of step t after its dense pushes of t and does not wait
// for them; it waits for them before its table pushes of t+1. Another worker
// can thus push t+1 (after its dense pull of t+1) and even t+2 before the
// first one's push of t arrives, but not t+3: that needs the first worker's
// dense push of t+2, sent after its table pushes of t were acknowledged.
inline constexpr int64_t kSyncStepsAhead = 2;

// The bucket of a pull of n ids: [0, 4), [4, 16), ... (powers of 4).
inline int PullSizeBucket(size_t n) {
  int b = 0;
  while (n >= 4 && b + 1 < kPullSizeBuckets) {
    n /= 4;
    ++b;
  }
  return b;
}

struct SparseStore::TableState {
  TableState(const TableSpec& spec, int num_workers, int admit_count)
      : table(spec, admit_count),
        num_workers(num_workers),
        copied_pushed(new std::atomic<int64_t>[num_workers]),
        last_pushed(num_workers, -1) {
    for (int r = 0; r < num_workers; ++r) copied_pushed[r] = -1;
  }

  struct RowGrads {
    std::vector<int64_t> ids;
    std::vector<float> grads;
  };

  SparseTable table;
  uint32_t index = 0;  // in the layout's tables
  absl::Mutex mu;
  std::atomic<int64_t> version{0};  // sync: steps applied; async, ssp: pushes applied
  std::atomic<int64_t> copied{0};   // replication: the version the next copy has acknowledged
  const int num_workers;
  // Replication, per rank: the last step of its pushes the next copy has
  // acknowledged; -1 before any (AwaitCopied in async and ssp).
  std::unique_ptr<std::atomic<int64_t>[]> copied_pushed;
  // sync: the gradients pushed so far, by step and rank, for step `version`
  // and up to kSyncStepsAhead steps after it. A worker can push a table
  // early: one whose rows it did not pull this step has no pull to wait on
  // the step before (an unused table, or one whose pull was prefetched).
  std::map<int64_t, std::vector<std::optional<RowGrads>>> pending ABSL_GUARDED_BY(mu);
  std::vector<int64_t> last_pushed ABSL_GUARDED_BY(mu);  // sync: each rank's last step pushed
  // sync checkpoints: the step to snapshot as it completes, and the snapshot.
  int64_t capture_at ABSL_GUARDED_BY(mu) = -1;
  std::optional<TableSnapshot> captured ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> pushes{0}, pulls{0}, rows_pushed{0}, rows_pulled{0};
  // Eviction: the largest step a request named, and that of the last sweep.
  std::atomic<int64_t> step_seen{0}, swept_at{0};
  std::atomic<int64_t> pull_sizes[kPullSizeBuckets] = {};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SPARSE_TABLE_STATE_H_
