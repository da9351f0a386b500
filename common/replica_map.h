// Replication (DESIGN.md, "Replication"): which servers hold a key, and
// which of them serves it.
//
// A key's primary is its owner in the KeyMap (common/key_partition.h); with
// `replicas` = R it has R - 1 backups on the next server ids, a chain
// p, p+1, ..., p+R-1 (mod S). Every server backs up the keys of the R - 1
// servers before it, so it holds its own bytes and theirs: KeyMap balances
// the primaries by bytes, and so the chains balance what each server holds.
// (Sparse tables are not replicated yet: a replicated job refuses them.)
//
// The server that serves a chain's keys is its first member that has not
// failed; none when every copy has (then checkpoints are the answer). The
// failed servers are a set of server ids (a bit mask: at most 64 servers
// with replicas > 1). A pure function: every process computes the same.
#ifndef SHARDPS_COMMON_REPLICA_MAP_H_
#define SHARDPS_COMMON_REPLICA_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardps {

inline constexpr int kMaxReplicatedServers = 64;

// A set of server ids, as the bits of a mask.
struct ServerSet {
  uint64_t bits = 0;

  bool Has(int server) const { return server >= 0 && server < 64 && ((bits >> server) & 1) != 0; }
  void Add(int server) { bits |= uint64_t{1} << server; }
  bool operator==(const ServerSet& o) const { return bits == o.bits; }
  std::string DebugString() const;  // "{1, 3}"
};

class ReplicaMap {
 public:
  // INVALID_ARGUMENT unless 1 <= replicas <= num_servers, and num_servers <=
  // 64 when replicas > 1.
  static absl::StatusOr<ReplicaMap> Build(int num_servers, int replicas);

  int num_servers() const { return num_servers_; }
  int replicas() const { return replicas_; }

  // The servers holding primary `primary`'s keys: primary first.
  std::vector<int> Chain(int primary) const;
  // Whether `server` holds `primary`'s keys (as primary or backup).
  bool Holds(int server, int primary) const;
  // The primaries whose keys `server` holds, itself first.
  std::vector<int> PrimariesHeldBy(int server) const;
  // The first server of `primary`'s chain not in `failed`; -1 when none.
  int Serving(int primary, ServerSet failed) const;
  // The next server after `server` in `primary`'s chain that is not in
  // `failed`: where `server` forwards updates; -1 when none.
  int NextLiveAfter(int primary, int server, ServerSet failed) const;

 private:
  ReplicaMap(int num_servers, int replicas) : num_servers_(num_servers), replicas_(replicas) {}
  int num_servers_;
  int replicas_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_REPLICA_MAP_H_
