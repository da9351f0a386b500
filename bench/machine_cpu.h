// The whole machine's CPU use between two samples of /proc/stat, for the
// benchmarks' "was this run CPU-bound" column.
#ifndef SHARDPS_BENCH_MACHINE_CPU_H_
#define SHARDPS_BENCH_MACHINE_CPU_H_

#include <cstdio>

namespace shardps {

struct CpuSample {
  double busy = 0, total = 0;  // jiffies summed over all cores
};

// All cores' busy and total jiffies now; zeros when /proc/stat is unreadable.
inline CpuSample SampleMachineCpu() {
  CpuSample s;
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return s;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (std::fscanf(f, "cpu %lf %lf %lf %lf %lf %lf %lf %lf", &user, &nice, &system, &idle, &iowait, &irq, &softirq,
                  &steal) == 8) {
    s.busy = user + nice + system + irq + softirq;
    s.total = s.busy + idle + iowait + steal;
  }
  std::fclose(f);
  return s;
}

// The fraction of all cores busy between `a` and `b` (0 when unknown).
inline double BusyFraction(const CpuSample& a, const CpuSample& b) {
  const double total = b.total - a.total;
  return total > 0 ? (b.busy - a.busy) / total : 0.0;
}

}  // namespace shardps

#endif  // SHARDPS_BENCH_MACHINE_CPU_H_
