#include "common/replica_map.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardps {

Standing ServerView::standing(int server) const {
  switch (generation(server) % 3) {
    case 0: return Standing::kLive;
    case 1: return Standing::kFailed;
    default: return Standing::kJoining;
  }
}

bool ServerView::Pristine() const {
  return std::all_of(gen_.begin(), gen_.end(), [](uint32_t g) { return g == 0; });
}

int ServerView::Count(Standing s) const {
  int n = 0;
  for (int server = 0; server < kMaxReplicatedServers; ++server) n += standing(server) == s ? 1 : 0;
  return n;
}

void ServerView::MarkFailed(int server) {
  if (!InRange(server)) return;
  while (gen_[server] % 3 != 1) ++gen_[server];
}

void ServerView::MarkJoining(int server) {
  if (!InRange(server)) return;
  const uint32_t top = *std::max_element(gen_.begin(), gen_.end());
  gen_[server] = (top / 3 + 1) * 3 + 2;  // 3k + 2 with 3k above every generation
}

void ServerView::MarkLive(int server) {
  if (InRange(server) && gen_[server] % 3 == 2) ++gen_[server];
}

std::vector<int> ServerView::Merge(const ServerView& other) {
  std::vector<int> rose;
  for (int s = 0; s < kMaxReplicatedServers; ++s) {
    if (other.gen_[s] > gen_[s]) {
      gen_[s] = other.gen_[s];
      rose.push_back(s);
    }
  }
  return rose;
}

std::string ServerView::Text() const {
  int last = kMaxReplicatedServers - 1;
  while (last >= 0 && gen_[last] == 0) --last;
  return absl::StrJoin(gen_.begin(), gen_.begin() + last + 1, ",");
}

std::optional<ServerView> ServerView::Parse(absl::string_view text) {
  ServerView view;
  if (text.empty()) return view;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  if (parts.size() > kMaxReplicatedServers) return std::nullopt;
  for (size_t s = 0; s < parts.size(); ++s) {
    const absl::string_view p = parts[s];
    if (p.empty() || p.size() > 10 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(p, &view.gen_[s]) || view.gen_[s] > kMaxGeneration) {
      return std::nullopt;
    }
  }
  return view;
}

std::string ServerView::DebugString() const {
  std::vector<std::string> parts;
  for (int s = 0; s < kMaxReplicatedServers; ++s) {
    if (Failed(s)) parts.push_back(absl::StrCat(s, " failed"));
    if (Joining(s)) parts.push_back(absl::StrCat(s, " joining"));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
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

// Serving and NextCopy walk the chain without allocating: they run for
// every key a push, pull or sync step touches.
int ReplicaMap::Serving(int primary, const ServerView& view) const {
  int best = -1;
  for (int i = 0; i < replicas_; ++i) {
    const int s = (primary + i) % num_servers_;
    if (view.Live(s) && (best < 0 || view.generation(s) < view.generation(best))) best = s;
  }
  return best;
}

int ReplicaMap::NextCopy(int primary, int server, const ServerView& view, bool with_joining) const {
  const int serving = Serving(primary, view);
  if (serving < 0 || view.Failed(server) || !Holds(server, primary)) return -1;
  // The members after `server` in the order (serving first, then by
  // generation and chain position): those that rank after it.
  auto rank_of = [&](int s, int i) { return s == serving ? -1 : int64_t{view.generation(s)} * 64 + i; };
  const int64_t own = rank_of(server, ((server - primary) % num_servers_ + num_servers_) % num_servers_);
  int next = -1;
  int64_t next_rank = 0;
  for (int i = 0; i < replicas_; ++i) {
    const int s = (primary + i) % num_servers_;
    if (view.Failed(s) || (!with_joining && view.Joining(s))) continue;
    const int64_t r = rank_of(s, i);
    if (r > own && (next < 0 || r < next_rank)) {
      next = s;
      next_rank = r;
    }
  }
  return next;
}

}  // namespace shardps
