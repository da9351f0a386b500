#include "client/failover.h"

#include <algorithm>
#include <string>

#include "spdlog/spdlog.h"

namespace shardps {

ServerConnection* Failover::Serving(int server) const {
  const int serving = map_.Serving(server, failed());
  return serving < 0 ? nullptr : connections_[serving];
}

void Failover::MarkFailed(ServerSet servers, absl::string_view why) {
  const uint64_t before = failed_bits_.fetch_or(servers.bits);
  const uint64_t added = servers.bits & ~before;
  if (added == 0) return;
  std::vector<Kept> again;
  {
    absl::MutexLock lock(&mu_);
    for (const Kept& k : kept_) {
      if ((added >> k.server) & 1) again.push_back(k);
    }
  }
  for (int s = 0; s < 64; ++s) {
    if (!((added >> s) & 1)) continue;
    const int serving = map_.Serving(s, failed());
    if (serving < 0) {
      spdlog::error("server {} failed ({}) and so did every copy of its keys: waiting for it to come back", s,
                    std::string(why));
    } else {
      spdlog::warn("server {} failed ({}): its keys are served by server {} from now on", s, std::string(why),
                   serving);
    }
    connections_[s]->CancelInFlight();  // calls waiting on it go to the backup now
    connections_[s]->TellFailed();      // if it is only paused, it steps down when it resumes
  }
  for (const Kept& k : again) {
    ServerConnection* to = Serving(k.server);
    if (to == nullptr) continue;
    to->Call(k.spec, k.attempt, [server = k.server, step = k.step](absl::Status st) {
      if (!st.ok()) {
        spdlog::warn("the push of step {} kept for server {} was refused by its backup: {}", step, server,
                     std::string(st.message()));
      }
    });
  }
}

void Failover::Retain(int server, int64_t step, const CallSpec& spec, const ServerConnection::Attempt& attempt) {
  // A server taken for failed that acknowledges a push anyway (a paused one
  // resuming before it learns it stepped down): the push goes to the backup.
  if (failed().Has(server)) {
    if (ServerConnection* to = Serving(server)) to->Call(spec, attempt, [](absl::Status) {});
  }
  absl::MutexLock lock(&mu_);
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [&](const Kept& k) { return k.server == server && k.step <= step - keep_steps_; }),
              kept_.end());
  kept_.push_back(Kept{server, step, spec, attempt});
}

}  // namespace shardps
