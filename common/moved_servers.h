// Replication (DESIGN.md, "Replication"): servers that joined a running job
// at another address than the one the job started with. A spare machine
// takes a failed server's place with `ps_server --id=K --join=ADDRESSES`,
// its own new address in slot K of the list; every process learns it from
// the metadata that carries the view of the job's servers
// (common/replica_map.h), and its workers' and peers' calls go there from
// then on.
//
// Each entry is tagged with the joining generation of the server's view
// (3k+2) at which it was made, so that entries merge as views do, in any
// order: the newer join wins. On the wire (metadata kServerMovedKey):
// "K=GEN@ADDRESS;..." in id order; an address is 1-255 printable
// characters without ';' or spaces.
//
// Thread-safe. Text() takes no lock while nothing has moved: it runs for
// every call.
#ifndef SHARDPS_COMMON_MOVED_SERVERS_H_
#define SHARDPS_COMMON_MOVED_SERVERS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/replica_map.h"

namespace shardps {

class MovedServers {
 public:
  // Entries for server ids below `num_servers` only (the job's).
  explicit MovedServers(int num_servers = kMaxReplicatedServers) : num_servers_(num_servers) {}
  // The longest text kept or taken: a metadata entry well within gRPC's
  // limits, whatever peers send.
  static constexpr size_t kMaxTextBytes = 4096;

  // Records that `server`, joining at `generation`, listens at `address`.
  // Returns whether its entry changed; false for an older or equal
  // generation than the one recorded, and for an entry that is not valid
  // (IsValid).
  bool Note(int server, uint32_t generation, const std::string& address);
  // Merges another process's Text(). Returns the servers whose entry
  // changed (none for this one's own text, checked before any parsing);
  // nullopt (and nothing merged) for text that does not parse.
  std::optional<std::vector<int>> Merge(absl::string_view text);
  // Where `server` listens now, if it moved; else nullopt.
  std::optional<std::string> AddressOf(int server) const;
  // `addresses` (the job's, in id order) with every move applied.
  std::vector<std::string> Apply(std::vector<std::string> addresses) const;
  // "" when nothing moved.
  std::string Text() const;

  // A server id below num_servers, a joining generation, an address as above.
  bool IsValid(int server, uint32_t generation, absl::string_view address) const;

 private:
  struct Entry {
    uint32_t generation = 0;
    std::string address;
  };
  bool NoteLocked(int server, uint32_t generation, const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_servers_;
  mutable absl::Mutex mu_;
  std::map<int, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::string text_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> any_{false};
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_MOVED_SERVERS_H_
