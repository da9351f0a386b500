// A Chrome/Perfetto trace of one process (the trace-event JSON format that
// ui.perfetto.dev and chrome://tracing open): what it computed and waited
// for, on named tracks, and the transfers it had in flight, as async spans
// that may overlap. Timestamps are the wall clock in microseconds, so the
// traces of processes on one machine (or on machines with synchronised
// clocks) line up when merged (tools/merge_traces).
//
// Thread-safe. Recording takes a lock and appends; at most `max_events` are
// kept, later ones are counted in dropped().
#ifndef SHARDPS_COMMON_TRACE_H_
#define SHARDPS_COMMON_TRACE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardps {

// Numeric arguments of an event, shown beside it ("step", "bytes", ...).
using TraceArgs = std::vector<std::pair<const char*, int64_t>>;

class Trace {
 public:
  explicit Trace(std::string process_name, size_t max_events = size_t{1} << 21);
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // A span on a track of its own ("compute", "wait"): spans on one track must
  // not overlap (a track is drawn as one thread).
  void Span(absl::string_view track, std::string name, absl::Time start, absl::Time end, TraceArgs args = {});
  // A span that may overlap others of its category ("push", "pull"): drawn on
  // rows of their own.
  void Async(absl::string_view category, std::string name, absl::Time start, absl::Time end, TraceArgs args = {});
  // A point in time on a track.
  void Instant(absl::string_view track, std::string name, absl::Time at, TraceArgs args = {});

  // The events so far as trace-event JSON, written to `path` (a temporary
  // file, then renamed). INTERNAL naming the path when it cannot be written.
  absl::Status Write(const std::string& path) const;
  std::string Json() const;
  size_t events() const;
  int64_t dropped() const;

 private:
  struct Event {
    char phase;  // 'X' span, 'b'/'e' async begin/end, 'i' instant
    int track;   // the tid
    std::string name;
    std::string category;
    int64_t ts_us, dur_us;
    uint64_t id;
    TraceArgs args;
  };
  void Add(Event e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int TrackId(absl::string_view track) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string process_name_;
  const size_t max_events_;
  const int pid_;
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> tracks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> track_names_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRACE_H_
