// CPU time this process has used (user + system), for the figures that show
// whether a run was CPU-bound.
#ifndef SHARDPS_COMMON_PROCESS_CPU_H_
#define SHARDPS_COMMON_PROCESS_CPU_H_

#include <sys/resource.h>

namespace shardps {

inline double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_PROCESS_CPU_H_
