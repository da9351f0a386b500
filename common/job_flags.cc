#include "common/job_flags.h"

#include <algorithm>
#include <vector>

namespace shardps {
namespace {

// Every ShardPS program's own flags (the job flags), sorted. Between the
// markers, tests/job_flag_files_test.sh reads the list and compares it with the
// programs' --helpfull and the Python library's job.flag() names.
// job flags begin
constexpr const char* kJobFlags[] = {
    "async_lr_scaling", "async_prefetch", "auth_token_file", "batch_size", "beta1", "beta2", "bind_address",
    "blas_threads", "bucket_bytes", "channels_per_server", "checkpoint_dir", "checkpoint_every",
    "checkpoint_every_seconds", "checkpoints_to_keep", "coalesce_pushes", "compute_ms", "data_dir", "device",
    "epochs", "epsilon", "eval_rank", "fetch_request_bytes", "first_weights_lane", "gpu", "health_port",
    "heartbeat_interval", "http2_bdp_probe", "in_flight_bytes", "join", "layout", "log_every", "log_level", "lr",
    "lr_gamma", "lr_min", "lr_schedule", "lr_step_size", "lr_total_steps", "lr_warmup_steps", "max_message_bytes",
    "max_steps_per_epoch", "metrics_address", "metrics_port", "mode", "model", "momentum", "momentum_lookahead",
    "nesterov", "num_servers", "num_workers", "optimizer", "partition_bytes", "peer_connect_timeout", "port",
    "pull_ahead", "pull_timeout", "pull_with_push", "push_request_bytes", "push_timeout", "rank", "replicas",
    "row_admit_count", "row_init_scale", "row_lr", "row_optimizer", "row_ttl_steps", "seed", "server_id",
    "server_timeout", "server_timeout_for_failover", "servers", "socket_priority", "staleness",
    "staleness_log_every", "staleness_lr", "steps", "stop_on_divergence", "summary_json", "synthetic",
    "tcp_congestion", "tf32", "timeout", "tls_ca", "tls_cert", "tls_key", "tls_mutual", "trace_file",
    "warmup_steps", "weight_decay", "wire_dtype", "worker_timeout",
};
// job flags end

}  // namespace

bool IsJobFlag(absl::string_view name) {
  return std::binary_search(std::begin(kJobFlags), std::end(kJobFlags), name,
                            [](absl::string_view a, absl::string_view b) { return a < b; });
}

std::string NearestJobFlag(absl::string_view name) {
  const int allowed = name.size() <= 4 ? 1 : 2;
  std::string nearest;
  int best = allowed + 1;
  for (absl::string_view flag : kJobFlags) {
    const int d = EditDistance(name, flag);
    if (d < best) {
      best = d;
      nearest = std::string(flag);
    }
  }
  return nearest;
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace shardps
