// ParameterServerImpl::Stats(): what the server reports to the metrics
// endpoint and to Admin status. See parameter_server_impl.h.
#include <tuple>

#include "server/parameter_server_impl.h"

namespace shardps {

ServerStats ParameterServerImpl::Stats() {
  ServerStats s;
  s.initialized = initialized_;
  s.tables = sparse_.Stats();
  if (s.initialized) {
    s.num_keys = static_cast<int>(table_->size());
    s.owned_bytes = table_->owned_bytes();
    std::tie(s.min_version, s.max_version) = table_->VersionRange();
  }
  s.live_workers = membership_.LiveCount();
  s.dead_workers_total = membership_.DeadTotal();
  s.pushes = pushes_;
  s.pulls = pulls_;
  s.waiting_pulls = waiters_.WaitingPulls();
  s.heartbeats = heartbeats_;
  s.refused = refused_;
  s.unauthenticated = unauthenticated_;
  s.bytes_pushed = bytes_pushed_;
  s.bytes_pulled = bytes_pulled_;
  s.steps_completed_short = sync_.steps_completed_short();
  s.apply_seconds = static_cast<double>(apply_nanos_) * 1e-9;
  s.checkpoint_step = checkpointer_.last_step();
  s.incarnation = incarnation_;
  s.timeline = timeline_;
  s.rewinds = rewinds_;
  s.steps_lost_total = steps_lost_total_;
  s.awaiting_rewind = awaiting_rewind_;
  s.checkpoint_steps = checkpointer_.Steps();
  s.staleness = staleness_.Read();
  s.under_replicated_keys = UnderReplicatedKeys();
  s.keys_awaiting_copy = KeysAwaitingCopy();
  s.replica_keys_sent = replica_keys_sent_;
  s.replica_keys_installed = replica_keys_installed_;
  s.push_acks_held = push_acks_held_;
  if (options_.replica_link != nullptr) s.replica_updates_superseded = options_.replica_link->UpdatesSuperseded();
  s.replica_bytes_sent = replica_bytes_sent_;
  s.view = View();
  s.keys_to_copy = keys_to_copy_.load();
  if (initialized_) {
    const Layout& layout = table_->map().layout();
    for (size_t t = 0; t < layout.tensors.size(); ++t) {
      s.staleness_by_tensor.emplace_back(layout.tensors[t].name, tensor_staleness_[t].Read());
    }
  }
  return s;
}

}  // namespace shardps
