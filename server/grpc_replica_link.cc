#include "server/grpc_replica_link.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/fanout.h"
#include "common/grpc_status.h"
#include "common/reconnect_args.h"
#include "common/rpc_metadata.h"
#include "common/tensor_frame.h"
#include "spdlog/spdlog.h"

namespace shardps {
namespace {

constexpr absl::Duration kRetryBackoff = absl::Milliseconds(50);

// The raw Replicate frame of `items`' updates, in order (a later update of
// a key supersedes an earlier one there): the keys' header, and their
// weights and slots as payloads the frame shares, not copies. The slots move
// out of `items`.
struct RawReplicate {
  wire::ReplicateRequest header;
  std::vector<SharedPayload> payloads;
};

RawReplicate FrameOf(std::vector<GrpcReplicaLink::Item>& items) {
  RawReplicate out;
  out.header.set_from_server(items.front().from);
  out.header.set_timeline(items.front().timeline);
  for (GrpcReplicaLink::Item& item : items) {
    for (ReplicaUpdate& u : item.updates) {
      wire::ReplicaKey* k = out.header.add_keys();
      k->mutable_key()->set_tensor(u.key.tensor);
      k->mutable_key()->set_chunk(u.key.chunk);
      k->set_version(u.version);
      k->set_raw_values(static_cast<int64_t>(u.weights->size()));
      k->set_raw_slots(static_cast<int32_t>(u.slots.size()));
      for (int64_t step : u.last_pushed_step) k->add_last_pushed_step(step);
      out.payloads.push_back(ShareFloats(u.weights));
      for (std::vector<float>& slot : u.slots) {
        out.payloads.push_back(ShareFloats(std::make_shared<const std::vector<float>>(std::move(slot))));
      }
    }
  }
  for (GrpcReplicaLink::Item& item : items) {  // the rows' payloads follow every key's
    for (const RowsReplica& r : item.rows) {
      wire::ReplicaRows* h = out.header.add_rows();
      h->set_primary(r.primary);
      h->set_table(r.table);
      h->set_version(r.version);
      h->set_count(static_cast<int64_t>(r.ids->size()));
      h->set_row_floats(r.row_floats);
      for (int64_t step : r.last_pushed_step) h->add_last_pushed_step(step);
      h->set_copy_done(r.copy_done);
      if (r.admission != nullptr) h->mutable_admission()->Add(r.admission->begin(), r.admission->end());
      const absl::string_view ids(reinterpret_cast<const char*>(r.ids->data()), r.ids->size() * sizeof(int64_t));
      out.payloads.push_back({r.ids, ids});
      out.payloads.push_back(ShareFloats(r.values));
    }
  }
  return out;
}

int64_t ItemBytes(const GrpcReplicaLink::Item& item) {
  int64_t bytes = 0;
  for (const ReplicaUpdate& u : item.updates) bytes += u.Bytes();
  for (const RowsReplica& r : item.rows) bytes += r.Bytes();
  return bytes;
}

// Where the newest update of each key in a call's items is: (item, index).
using Newest = absl::flat_hash_map<ChunkKey, std::pair<size_t, size_t>>;

// The bytes `item` adds to a call whose items `newest` describes: its own,
// less those of the updates it supersedes there.
int64_t AddedBytes(const GrpcReplicaLink::Item& item, const std::vector<GrpcReplicaLink::Item>& items,
                   const Newest& newest) {
  int64_t bytes = ItemBytes(item);
  for (const ReplicaUpdate& u : item.updates) {
    if (auto it = newest.find(u.key); it != newest.end()) {
      bytes -= items[it->second.first].updates[it->second.second].Bytes();
    }
  }
  return bytes;
}

// Drops every update that a later one of the same key in the same call
// supersedes (it carries the key whole, weights and slots, at a newer
// version). Each item's `done` still runs with the call's answer: the newer
// version it confirms came in the same call. Rows are kept: each carries
// only the rows one update touched.
int64_t DropSuperseded(std::vector<GrpcReplicaLink::Item>& items, const Newest& newest) {
  int64_t dropped = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<ReplicaUpdate>& updates = items[i].updates;
    size_t kept = 0;
    for (size_t j = 0; j < updates.size(); ++j) {
      if (newest.at(updates[j].key) != std::pair<size_t, size_t>{i, j}) continue;
      if (kept != j) updates[kept] = std::move(updates[j]);
      ++kept;
    }
    dropped += static_cast<int64_t>(updates.size() - kept);
    updates.resize(kept);
  }
  return dropped;
}

// One Replicate call, waited for.
grpc::Status CallRaw(grpc::GenericStub& stub, grpc::ClientContext* ctx, grpc::ByteBuffer* request) {
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(ctx, kRawReplicateMethod, grpc::StubOptions(), request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// A Replicate attempt's deadline for `frame`.
absl::Duration AttemptDeadline(const ReplicaLinkOptions& options, const RawReplicate& frame) {
  // The failover timeout, plus the frame's bytes at a slow 20 MB/s (a large
  // update takes a while), at most attempt_timeout. A backup that is silent
  // (paused) is then taken for failed within about two failover timeouts,
  // as workers take a silent primary. A deadline of attempt_timeout alone
  // (10 s) outlasted a pause of twice the timeout: neither this link nor a
  // worker with no call waiting on the paused server noticed it.
  int64_t bytes = 0;
  for (const SharedPayload& p : frame.payloads) bytes += static_cast<int64_t>(p.bytes.size());
  const absl::Duration transfer = absl::Seconds(static_cast<double>(bytes) / (20 << 20));
  return std::min(options.attempt_timeout, options.failover_timeout + transfer);
}

}  // namespace

absl::Duration SilenceBeforeFailed(absl::Duration failover_timeout, int from, int to, int servers) {
  return servers == 2 && to < from ? 2 * failover_timeout : failover_timeout;
}

absl::StatusOr<std::unique_ptr<GrpcReplicaLink>> GrpcReplicaLink::Create(const ReplicaLinkOptions& options) {
  if (absl::Status valid = CheckPeerConnectTimeout(options.connect_timeout); !valid.ok()) return valid;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<GrpcReplicaLink>(new GrpcReplicaLink(options, *std::move(credentials)));
}

GrpcReplicaLink::~GrpcReplicaLink() {
  std::vector<std::thread> senders;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [to, peer] : peers_) senders.push_back(std::move(peer->sender));
  }
  for (std::thread& t : senders) {
    if (t.joinable()) t.join();
  }
}

void GrpcReplicaLink::SetPeers(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  if (addresses_.empty()) addresses_ = addresses;
}

void GrpcReplicaLink::Renew(int to) {
  absl::MutexLock lock(&mu_);
  if (auto it = peers_.find(to); it != peers_.end()) it->second->renew = true;
}

void GrpcReplicaLink::Readdress(int to, const std::string& address) {
  absl::MutexLock lock(&mu_);
  moved_[to] = address;
  if (auto it = peers_.find(to); it != peers_.end()) it->second->renew = true;
}

std::string GrpcReplicaLink::AddressOf(int to) const {
  if (auto it = moved_.find(to); it != moved_.end()) return it->second;
  return to < static_cast<int>(addresses_.size()) ? addresses_[to] : "";
}

void GrpcReplicaLink::Send(int from, int to, int64_t timeline, std::vector<ReplicaUpdate> updates,
                           std::function<void(absl::Status)> done) {
  // A call carries at most half the message limit (Run). A whole copy for a
  // joiner may be far more, so it is queued as several items, each within
  // that, and `done` runs once every one is answered, with the first error.
  const int64_t part_bytes = options_.max_message_bytes / 2;
  std::vector<std::vector<ReplicaUpdate>> parts(1);
  int64_t bytes = 0;
  for (ReplicaUpdate& u : updates) {
    if (!parts.back().empty() && bytes + u.Bytes() > part_bytes) {
      parts.emplace_back();
      bytes = 0;
    }
    bytes += u.Bytes();
    parts.back().push_back(std::move(u));
  }
  if (parts.size() == 1) return Queue(to, Item{from, timeline, std::move(parts[0]), std::move(done), {}});
  auto all = std::make_shared<CallFanout>(static_cast<int>(parts.size()), std::move(done));
  for (std::vector<ReplicaUpdate>& part : parts) {
    Queue(to, Item{from, timeline, std::move(part), [all](absl::Status status) { all->Finish(status); }, {}});
  }
}

void GrpcReplicaLink::SendRows(int from, int to, int64_t timeline, std::vector<RowsReplica> rows,
                               std::function<void(absl::Status)> done) {
  Queue(to, Item{from, timeline, {}, std::move(done), std::move(rows)});
}

void GrpcReplicaLink::Queue(int to, Item item) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    item.done(absl::UnavailableError("the server is shutting down"));
    return;
  }
  std::unique_ptr<Peer>& peer = peers_[to];
  if (peer == nullptr) {
    peer = std::make_unique<Peer>();
    peer->sender = std::thread([this, to] { Run(to); });
  }
  peer->queue.push_back(std::move(item));
}

void GrpcReplicaLink::Run(int to) {
  for (;;) {
    std::vector<Item> items;
    Peer* peer = nullptr;
    absl::Duration silence;  // before the peer counts as failed
    {
      absl::MutexLock lock(&mu_);
      peer = peers_[to].get();
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!peer->queue.empty() && !AddressOf(to).empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) {
        for (Item& item : peer->queue) item.done(absl::UnavailableError("the server is shutting down"));
        peer->queue.clear();
        return;
      }
      if (peer->stub == nullptr || peer->renew) {
        peer->renew = false;
        grpc::ChannelArguments args;
        args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
        args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
        for (const auto& [name, value] : ReconnectArgs(options_.connect_timeout)) args.SetInt(name, value);
        peer->stub = std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(AddressOf(to), credentials_, args));
      }
      // What queued, in order, in one call of at most half the message
      // limit (one item at least) and of one timeline: a whole copy for a
      // joiner may be large.
      // A key updated again before its update left goes once, at its newest
      // version: a link that falls behind (async and ssp forward every
      // push) sends each key once a call, not once a push.
      int64_t bytes = 0;
      Newest newest;
      while (!peer->queue.empty()) {
        if (!items.empty() && peer->queue.front().timeline != items.front().timeline) break;
        const int64_t next = AddedBytes(peer->queue.front(), items, newest);
        if (!items.empty() && bytes + next > options_.max_message_bytes / 2) break;
        bytes += next;
        items.push_back(std::move(peer->queue.front()));
        peer->queue.pop_front();
        const std::vector<ReplicaUpdate>& updates = items.back().updates;
        for (size_t j = 0; j < updates.size(); ++j) newest[updates[j].key] = {items.size() - 1, j};
      }
      superseded_ += DropSuperseded(items, newest);
      silence = SilenceBeforeFailed(options_.failover_timeout, items.front().from, to,
                                    static_cast<int>(addresses_.size()));
    }
    const absl::Status status = Deliver(*peer, to, items, silence);
    for (Item& item : items) item.done(status);
  }
}

bool GrpcReplicaLink::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

absl::Status GrpcReplicaLink::Deliver(Peer& peer, int to, std::vector<Item>& items, absl::Duration silence) {
  // One request: the items in order.
  const RawReplicate frame = FrameOf(items);
  const int keys = frame.header.keys_size() + frame.header.rows_size();
  absl::Time first = absl::Now();
  const absl::Duration deadline = AttemptDeadline(options_, frame);
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    if (!options_.auth_token.empty()) ctx.AddMetadata(kAuthorizationKey, kBearerPrefix + options_.auth_token);
    if (view_ours_) {
      for (const auto& [key, value] : view_ours_()) ctx.AddMetadata(key, value);
    }
    grpc::ByteBuffer request = EncodeFrame(frame.header, frame.payloads);
    const absl::Status status = FromGrpcStatus(CallRaw(*peer.stub, &ctx, &request));
    if (view_theirs_) view_theirs_(ctx.GetServerTrailingMetadata());
    if (absl::IsOutOfRange(status)) {
      // The peer answered: it is rewinding, or has not rewound to the
      // updates' timeline yet. Not silence: the clock starts again.
      if (Stopping()) return absl::UnavailableError("the server is shutting down");
      absl::SleepFor(kRetryBackoff);
      first = absl::Now();
      attempt = 0;
      continue;
    }
    if (status.ok() || !(absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status))) return status;
    const absl::Duration waited = absl::Now() - first;
    // A refused, reset or closed connection is a dead process (kill -9), not a slow one.
    const bool gone = PeerProcessGone(status);
    if (Stopping()) return absl::UnavailableError("the server is shutting down");
    // Silence counts only over two attempts or more: the first may have been
    // in flight while this process itself was paused (SIGSTOP, a stalled
    // VM), and a deadline that passed then says nothing about the peer.
    if (gone || (waited >= silence && attempt >= 2)) {
      const std::string over = absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(10)));
      return absl::UnavailableError(absl::StrCat(
          "server ", to, " did not take ", keys, " updated keys in ", attempt, " attempts over ", over, " (",
          absl::FormatDuration(silence), " allowed: --server_timeout_for_failover ",
          absl::FormatDuration(options_.failover_timeout), "): ", status.message()));
    }
    absl::SleepFor(kRetryBackoff);
  }
}

}  // namespace shardps
