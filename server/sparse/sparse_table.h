// One server's part of one sparse table: a hash map from id to row, rows and
// their optimizer slots in contiguous slabs, and 64 stripes each with its
// own lock (never one lock for the table). A row is created, with
// InitialRow(), the first time a pull or a push names it.
//
// Thread-safe. A batch of ids takes each stripe's lock once.
#ifndef SHARDPS_SERVER_SPARSE_SPARSE_TABLE_H_
#define SHARDPS_SERVER_SPARSE_SPARSE_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/table_spec.h"
#include "server/sparse/row_optimizer.h"

namespace shardps {

// One server's part of one table, as a checkpoint holds it.
struct TableSnapshot {
  int64_t version = 0;
  std::vector<int64_t> ids;
  std::vector<float> rows;   // ids.size() * dim
  std::vector<float> slots;  // ids.size() * slot floats
};

class SparseTable {
 public:
  // admit_count > 1: a row is stored only at its id's admit_count-th push;
  // before that it reads as its initial row and its gradients are dropped
  // (admission by count). 0 or 1: stored at its first touch.
  explicit SparseTable(const TableSpec& spec, int admit_count = 0);
  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  const TableSpec& spec() const { return spec_; }
  int dim() const { return spec_.dim; }
  int slot_floats() const { return slots_; }
  int row_floats() const { return spec_.dim + slots_; }  // a row and its slots, as Export writes them

  // Copies the rows of ids[0..n) into out[i * dim], creating missing ones
  // (with admission, a missing row is copied as its initial row, not made).
  void Read(const int64_t* ids, size_t n, float* out);
  // Applies grads[i * dim] times `grad_scale` to row ids[i] with the
  // table's optimizer, as `lr_share` of a step (row_optimizer.h). The ids
  // must be distinct.
  void Apply(const int64_t* ids, size_t n, const float* grads, float grad_scale, float lr_share = 1.0f);

  // Checkpoints: every row with its slots, stripe by stripe (each locked
  // while it is visited); and a row put back as it was.
  void ForEach(const std::function<void(int64_t id, const float* row, const float* slots)>& fn);
  void Put(int64_t id, const float* row, const float* slots);
  // Drops every row and every id counted toward admission (a restore puts
  // the checkpoint's rows back after it). The totals created and evicted stay.
  void Clear();
  // The rows of `ids`, each as dim values then its slots (a row not yet
  // admitted reads as its initial value with zero slots); with `admission`,
  // per id also -1 when its row is stored, else how many pushes have
  // counted toward storing it (admission by count, for copies).
  void Export(const int64_t* ids, size_t n, float* out, int32_t* admission = nullptr);

  // Admission by count, for copies (--replicas > 1): whether this table
  // admits rows by count, and an id's count put back on a copy (0 forgets
  // the id; a row stored here stays).
  bool admits_by_count() const { return admit_count_ > 1; }
  void PutWaiting(int64_t id, uint32_t pushes);
  // Every id counted toward admission and not stored yet, with its count.
  void ForEachWaiting(const std::function<void(int64_t id, uint32_t pushes)>& fn);

  // Eviction (--row_ttl_steps): rows read, updated, created or put back
  // from now on are touched at `step`; Evict() drops the rows last touched
  // before `step` and returns how many. A dropped row's place is reused,
  // and the row comes back as new (InitialRow) if its id is seen again.
  // With admission, a sweep also forgets the pushes counted toward it.
  void TouchAt(int64_t step) { touch_step_.store(static_cast<int32_t>(step), std::memory_order_relaxed); }
  int64_t Evict(int64_t step);

  int64_t rows() const { return rows_.load(std::memory_order_relaxed); }
  int64_t rows_created() const { return created_.load(std::memory_order_relaxed); }
  int64_t rows_evicted() const { return evicted_.load(std::memory_order_relaxed); }
  // Ids pushed but not yet admitted (with admission).
  int64_t ids_waiting() const { return waiting_.load(std::memory_order_relaxed); }
  // Bytes held: slabs, and the maps' slots and control bytes.
  int64_t bytes() const;

 private:
  static constexpr int kStripeBits = 6;
  static constexpr int kStripes = 1 << kStripeBits;
  static constexpr uint32_t kRowsPerSlab = 1024;

  // Where a stored row lives, and the step it was last touched: kept in the
  // map's own slot (16 bytes with the id, as a bare place would take with
  // padding), so a lookup touches no second array.
  struct Place {
    uint32_t row;
    int32_t touched;
  };
  struct Stripe {
    mutable absl::Mutex mu;
    absl::flat_hash_map<int64_t, Place> index ABSL_GUARDED_BY(mu);
    std::vector<std::unique_ptr<float[]>> slabs ABSL_GUARDED_BY(mu);
    std::vector<uint32_t> free ABSL_GUARDED_BY(mu);    // places of evicted rows
    absl::flat_hash_map<int64_t, uint32_t> seen ABSL_GUARDED_BY(mu);  // admission: pushes of ids not stored yet
    uint32_t used ABSL_GUARDED_BY(mu) = 0;
  };

  static int StripeOf(int64_t id) { return static_cast<int>(MixId(static_cast<uint64_t>(id)) & (kStripes - 1)); }
  // The row of `id` (then its slots), made from InitialRow() when new.
  float* RowOf(Stripe& s, int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  float* RowAt(const Stripe& s, uint32_t place) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    return s.slabs[place / kRowsPerSlab].get() + (place % kRowsPerSlab) * stride_;
  }
  // With admission: the stored row of `id`, or null when it is not stored
  // (yet); `pushed` counts a push toward its admission.
  float* AdmittedRowOf(Stripe& s, int64_t id, bool pushed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Positions 0..n) grouped by stripe: positions of stripe k are
  // order[begin[k]..begin[k+1]).
  void GroupByStripe(const int64_t* ids, size_t n, std::vector<uint32_t>& order,
                     std::array<uint32_t, kStripes + 1>& begin) const;
  // Runs fn(row, position) for every position, stripe by stripe (each
  // locked while it is visited): row is the id's row (AdmittedRowOf, so
  // null when not admitted). A stripe's rows are found first (each id's
  // map slot prefetched a few ids ahead), then visited with the next ones
  // prefetched: ids and rows are scattered over memory, and each lookup,
  // update or copy would otherwise wait on it.
  template <typename Fn>
  void ForRows(const int64_t* ids, size_t n, bool pushed, Fn&& fn);

  const TableSpec spec_;
  const int slots_;
  const size_t stride_;  // floats per row: dim + slots
  const RowOptimizerParams params_;
  const uint32_t admit_count_;
  std::array<Stripe, kStripes> stripes_;
  std::atomic<int64_t> rows_{0}, created_{0}, evicted_{0}, waiting_{0};
  std::atomic<int32_t> touch_step_{0};
};

// Whether `ids` are distinct and ascending, as a worker's plan sends them
// (what SparseTable::Apply takes as they are).
bool DistinctAscending(const std::vector<int64_t>& ids);
// One push's ids and their rows (ids->size() * dim floats).
struct IdRows {
  const std::vector<int64_t>* ids;
  const std::vector<float>* rows;
};
// Every id of `parts` once, in order of first sight, into `ids`, with the
// sum of its rows in that order (parts in order, then rows) into `sums`.
void SumRowsById(const std::vector<IdRows>& parts, size_t dim, std::vector<int64_t>& ids, std::vector<float>& sums);
// ids[i] with rows[i * dim .. +dim), each id once: a repeated id's rows
// summed into its first place (SparseTable::Apply wants distinct ids).
// Distinct ascending ids are left as they are.
void MergeRepeatedIds(std::vector<int64_t>& ids, std::vector<float>& rows, size_t dim);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SPARSE_SPARSE_TABLE_H_
