// The worker's side of replication (DESIGN.md, "Replication";
// common/replica_map.h): the job's servers as this worker knows them (which
// failed, which joined again), which connection serves each server's keys,
// and the sync pushes to push again there.
//
// A server is taken for failed when a transfer to it is refused, reset or
// closed (kill -9: common/grpc_status.h, PeerProcessGone), when it has not
// answered for --server_timeout_for_failover (a connection not set up in
// time among it), or when any server's answer says so (trailing metadata).
// Every request then carries the view (request metadata), and a server
// that learns of a failure serves the keys it backs up for it
// (server/parameter_server.h).
// Calls for a server's keys go to the server serving them now.
//
// A server that joins the job again (ps_server --join) is copied its keys
// by its peers; once it is live the worker registers with it, so that it
// knows the worker should it come to serve keys (the other copy failing).
//
// A push that the failed server acknowledged may not have reached its
// backup (a sync step not complete there yet; an async push forwarded but
// not yet acknowledged): each server's acknowledged pushes of the latest
// `keep_steps` steps are kept as copies and pushed again to the backup,
// which takes them as duplicates where its state includes them already.
// Sync keeps 1 step, async and ssp 4, rows 2 more (common/replica_map.h,
// KeptPushSteps): a server answers a push of step t only once the backup
// includes the worker's pushes up to that many steps before
// (ParameterServer::Push), whether or not the worker pulls.
//
// Thread-safe.
#ifndef SHARDPS_CLIENT_FAILOVER_H_
#define SHARDPS_CLIENT_FAILOVER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/server_connection.h"
#include "common/moved_servers.h"
#include "common/replica_map.h"
#include "common/shared_server_view.h"

namespace shardps {

class Failover {
 public:
  Failover(ReplicaMap map, absl::Duration timeout, int keep_steps)
      : map_(map), timeout_(timeout), keep_steps_(keep_steps) {}

  // The connections, in server-id order; before any call.
  void Attach(std::vector<ServerConnection*> connections) { connections_ = std::move(connections); }
  // From the first registration on: before it, a refused connection is a
  // server still starting, not a failed one.
  void Arm() { armed_ = true; }
  bool armed() const { return armed_; }

  const ReplicaMap& map() const { return map_; }
  absl::Duration timeout() const { return timeout_; }
  ServerView view() const { return view_.Load(); }
  // The server serving `server`'s keys now; -1 when no copy is live.
  int ServingId(int server) const { return map_.Serving(server, view()); }
  // The connection serving `server`'s keys now; null when every copy failed.
  ServerConnection* Serving(int server) const;
  // Merges `view` (`why` for the log). For each server that joins again:
  // fresh channels to it (the old ones may still fail calls at once with
  // the error they met while it was down). For each server live again: this
  // worker registers with it (calls for it wait for that). For each that
  // went down: its calls in flight are cancelled (they go to the server now
  // serving its keys). Then every kept push whose keys another server
  // serves now than the one it went to is pushed again there.
  void Merge(const ServerView& view, absl::string_view why);
  // Servers that joined at a new address (common/moved_servers.h): merges
  // `text` (read before the view it came with) and points each moved
  // server's connection at its new address. A text that does not parse is
  // ignored.
  void NoteMoved(absl::string_view text);
  std::string MovedText() const { return moved_.Text(); }
  // `addresses` (the job's, in id order) with every move applied.
  std::vector<std::string> Addresses(std::vector<std::string> addresses) const {
    return moved_.Apply(std::move(addresses));
  }
  // Marks `server` failed on evidence (`why`) gathered while its generation
  // in this view was `seen_generation`. Evidence from before its standing
  // last changed (it failed, or came back and joins) is about that earlier
  // standing, not about the server now: dropped, and false returned. (A
  // rejoined server's keys were once taken from it this way: a call that
  // had failed since the first kill timed out after the join, or failed on a
  // channel still in backoff from it, and marked the joined server failed.)
  bool MarkFailed(int server, absl::string_view why, uint32_t seen_generation);
  // A push of `step` for `server`'s keys, acknowledged by server
  // `acked_by`: kept until the pushes of `keep_steps` later steps are. It
  // is pushed again at once, to the server serving those keys now, when
  // that is another (acked_by went down meanwhile, or was a paused one
  // that had not yet learned it stepped down); a duplicate is dropped.
  // Pushes of rows (`rows`) are kept apart, for 2 steps more: a worker may
  // push a table's rows up to 2 steps ahead of the server's step there
  // (server/sparse/table_state.h, kSyncStepsAhead).
  // `timeline`: the job's when the push was sent (timeline()); the answer
  // to a push of a timeline the job has left since is not kept.
  void Retain(int server, int acked_by, int64_t step, const CallSpec& spec, const ServerConnection::Attempt& attempt,
              int64_t timeline, bool rows = false);
  // The job's timeline and step, from this worker's registration (a server
  // live again is registered with on it). A new timeline (a rewind) drops
  // every kept push: they are of steps the job left behind, and pushed
  // again to a backup they would redo them there.
  void SetTimeline(int64_t timeline, int64_t step);
  int64_t timeline() const { return timeline_.load(); }
  // Where this worker registers with a server live again: the step of its
  // latest acknowledged push (every earlier step's pushes are done: a sync
  // or ssp worker pushes a step only after pulling the one before), so that
  // the server counts it in every step it may still push to.
  ResumeAt RevivalPoint() const { return ResumeAt{std::max<int64_t>(last_step_.load(), 0), timeline_.load()}; }

 private:
  struct Kept {
    int server = 0;   // whose keys
    int sent_to = 0;  // the server that acknowledged it, or it was last pushed again to
    int64_t step = 0;
    bool rows = false;
    CallSpec spec;
    ServerConnection::Attempt attempt;
  };
  // Pushes every kept push again to the server serving its keys now where
  // that is not the one it went to (it went down, or the push found no
  // serving server when it did and one is live now).
  void PushKeptAgain();

  const ReplicaMap map_;
  const absl::Duration timeout_;
  const int keep_steps_;
  std::vector<ServerConnection*> connections_;
  std::atomic<bool> armed_{false};
  std::atomic<int64_t> last_step_{-1}, timeline_{0};
  SharedServerView view_;
  MovedServers moved_{map_.num_servers()};
  absl::Mutex mu_;
  std::vector<Kept> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_FAILOVER_H_
