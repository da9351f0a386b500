#include "common/replica_map.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

std::string ServerSet::DebugString() const {
  std::vector<int> ids;
  for (int s = 0; s < 64; ++s) {
    if (Has(s)) ids.push_back(s);
  }
  return absl::StrCat("{", absl::StrJoin(ids, ", "), "}");
}

absl::StatusOr<ReplicaMap> ReplicaMap::Build(int num_servers, int replicas) {
  if (num_servers < 1) return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, "; want >= 1"));
  if (replicas < 1 || replicas > num_servers) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas=", replicas, " with ", num_servers,
                                                   " servers; want 1 to the number of servers"));
  }
  if (replicas > 1 && num_servers > kMaxReplicatedServers) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas=", replicas, " supports at most ",
                                                   kMaxReplicatedServers, " servers; this job has ", num_servers));
  }
  return ReplicaMap(num_servers, replicas);
}

std::vector<int> ReplicaMap::Chain(int primary) const {
  std::vector<int> chain;
  for (int i = 0; i < replicas_; ++i) chain.push_back((primary + i) % num_servers_);
  return chain;
}

bool ReplicaMap::Holds(int server, int primary) const {
  const int distance = ((server - primary) % num_servers_ + num_servers_) % num_servers_;
  return distance < replicas_;
}

std::vector<int> ReplicaMap::PrimariesHeldBy(int server) const {
  std::vector<int> out;
  for (int i = 0; i < replicas_; ++i) out.push_back(((server - i) % num_servers_ + num_servers_) % num_servers_);
  return out;
}

// Serving and NextLiveAfter walk the chain without building it: they run
// for every key a push, pull or sync step touches.
int ReplicaMap::Serving(int primary, ServerSet failed) const {
  for (int i = 0; i < replicas_; ++i) {
    const int s = (primary + i) % num_servers_;
    if (!failed.Has(s)) return s;
  }
  return -1;
}

int ReplicaMap::NextLiveAfter(int primary, int server, ServerSet failed) const {
  bool after = false;
  for (int i = 0; i < replicas_; ++i) {
    const int s = (primary + i) % num_servers_;
    if (after && !failed.Has(s)) return s;
    if (s == server) after = true;
  }
  return -1;
}

}  // namespace shardps
