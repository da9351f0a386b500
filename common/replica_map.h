// Replication (DESIGN.md, "Replication"): which servers hold a key, and
// which of them serves it.
//
// A key's primary is its owner in the KeyMap (common/key_partition.h); with
// `replicas` = R it has R - 1 backups on the next server ids, a chain
// p, p+1, ..., p+R-1 (mod S). Every server backs up the keys of the R - 1
// servers before it, so it holds its own bytes and theirs: KeyMap balances
// the primaries by bytes, and so the chains balance what each server holds.
// A sparse table's rows follow the same chains: a server's rows (those whose
// id hashes to it, common/table_spec.h RowServer) have their copies on the
// next servers (server/parameter_server_rows.cc).
//
// Who serves a chain's keys follows the job's ServerView: each server's
// standing (live, failed, or joining: re-filled from its peers after a
// restart) as a generation number that only grows, so that views merge by
// taking the larger number per server, in any order, and every process
// converges on the same one. The live member that has been live longest
// (the smallest generation; chain order among equals) serves; a server that
// comes back joins with a generation above every other, so it never takes
// keys from the server that kept them while it was away. None serves when
// no member is live (then checkpoints are the answer). Pure functions:
// every process computes the same. At most 64 servers with replicas > 1.
#ifndef SHARDPS_COMMON_REPLICA_MAP_H_
#define SHARDPS_COMMON_REPLICA_MAP_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

inline constexpr int kMaxReplicatedServers = 64;

// The steps of acknowledged pushes a worker keeps to send again after a
// failover (client/failover.h): sync 1, async and ssp 4; pushes of rows 2
// more. A server answers a push of step t only once the backup includes the
// worker's pushes up to step t - KeptPushSteps (server/parameter_server_acks.cc),
// so the pushes a worker has dropped are never needed.
inline int KeptPushSteps(bool sync) { return sync ? 1 : 4; }
inline constexpr int kExtraKeptRowSteps = 2;

// Generations above this are refused from the wire (far from wrapping).
inline constexpr uint32_t kMaxGeneration = uint32_t{1} << 30;

enum class Standing { kLive, kFailed, kJoining };

// Every server's standing, as a generation per server id: 3k live, 3k+1
// failed, 3k+2 joining. A job starts with every server live at 0.
class ServerView {
 public:
  uint32_t generation(int server) const { return InRange(server) ? gen_[server] : 0; }
  Standing standing(int server) const;
  bool Failed(int server) const { return standing(server) == Standing::kFailed; }
  bool Live(int server) const { return standing(server) == Standing::kLive; }
  bool Joining(int server) const { return standing(server) == Standing::kJoining; }
  // Every server live at generation 0: nothing has happened yet.
  bool Pristine() const;
  // How many servers stand so.
  int Count(Standing standing) const;

  // `server` failed: its next failed generation (unchanged when failed).
  void MarkFailed(int server);
  // `server` joins again: a joining generation above every other in the view.
  void MarkJoining(int server);
  // `server` has its copies: live at the generation after its joining one.
  // REQUIRES: Joining(server).
  void MarkLive(int server);

  // Takes the larger generation per server; returns the servers whose
  // generation rose.
  std::vector<int> Merge(const ServerView& other);
  bool operator==(const ServerView& o) const { return gen_ == o.gen_; }

  // For metadata: the generations in id order, comma-separated, up to the
  // last non-zero one ("" when pristine). Parse reads it back; nullopt for
  // anything else (more than 64 entries, signs, spaces, a generation above
  // kMaxGeneration).
  std::string Text() const;
  static std::optional<ServerView> Parse(absl::string_view text);
  // For messages: "{1 failed, 2 joining}"; "{}" when every server is live.
  std::string DebugString() const;

 private:
  friend class SharedServerView;  // common/shared_server_view.h: loads and stores the generations
  static bool InRange(int server) { return server >= 0 && server < kMaxReplicatedServers; }
  std::array<uint32_t, kMaxReplicatedServers> gen_{};
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
  // The live member of `primary`'s chain with the smallest generation
  // (chain order among equals); -1 when none is live.
  int Serving(int primary, const ServerView& view) const;
  // Where `server` forwards `primary`'s updates: the next member after it in
  // the order serving first, then the other members not failed by
  // generation; -1 when none. Joining members count only with
  // `with_joining` (they take updates; pulls do not wait for them).
  int NextCopy(int primary, int server, const ServerView& view, bool with_joining = true) const;

 private:
  ReplicaMap(int num_servers, int replicas) : num_servers_(num_servers), replicas_(replicas) {}
  int num_servers_;
  int replicas_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_REPLICA_MAP_H_
