// How many times this process's threads stopped to wait (voluntary context
// switches: a wake-up each, for a message, a timer or a lock). Unlike CPU
// time, the count does not grow when other processes crowd the same cores,
// so per step it shows whether a step's work grows with the number of
// workers.
#ifndef SHARDPS_BENCH_PROCESS_EVENTS_H_
#define SHARDPS_BENCH_PROCESS_EVENTS_H_

#include <sys/resource.h>

#include <cstdint>

namespace shardps {

// Every thread's voluntary context switches so far, ended threads included.
inline int64_t ProcessWaits() {
  rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_nvcsw : 0;
}

}  // namespace shardps

#endif  // SHARDPS_BENCH_PROCESS_EVENTS_H_
