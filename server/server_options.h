// Everything a ParameterServer is configured with. Filled from flags in
// server/ps_server_main.cc and nowhere else.
#ifndef SHARDPS_SERVER_SERVER_OPTIONS_H_
#define SHARDPS_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/job_view.h"
#include "server/optimizer.h"

namespace shardps {

struct ServerOptions {
  int server_id = 0;
  JobView job;  // mode, staleness, counts, partition bytes; layout_hash unused.
  OptimizerOptions optimizer;

  absl::Duration worker_timeout = absl::Seconds(30);
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // A gap this long between housekeeping ticks means the server itself did
  // not run (stopped or starved); it is not counted as workers' silence.
  absl::Duration pause_threshold = absl::Seconds(1);

  std::string checkpoint_dir;          // empty: no checkpoints.
  int64_t checkpoint_every_steps = 0;  // 0: not by steps.
  absl::Duration checkpoint_every_interval = absl::ZeroDuration();  // zero: not by time.
  int checkpoints_to_keep = 2;         // the newest this many stay on disk.
  bool checkpoint_on_shutdown = true;  // with a checkpoint_dir.
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVER_OPTIONS_H_
