// ServerConnection (client/server_connection.h): its channels. Where they
// point (Repoint), replacing them (Renew, a longer connect timeout after
// handshakes that time out) and closing the replaced ones once no call holds
// them, on the heartbeat thread (gRPC aborts when a channel's last
// reference goes on one of its callback threads).
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/server_connection.h"
#include "common/bulk_channel_args.h"
#include "common/reconnect_args.h"
#include "common/tcp_congestion.h"
#include "spdlog/spdlog.h"

namespace shardps {

std::vector<std::shared_ptr<Stub>> ServerConnection::MakeStubs(const std::string& address,
                                                              absl::Duration connect_timeout) const {
  std::vector<std::shared_ptr<Stub>> stubs;
  const int channels = std::max(1, options_.channels_per_server) + (options_.UsesFirstWeightsLane() ? 1 : 0);
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    args.SetInt("shardps.channel_index", c);  // distinct args: distinct TCP connections.
    for (const auto& [name, value] : BulkChannelArgs(options_.http2_bdp_probe)) args.SetInt(name, value);
    UseTcpCongestion(options_.tcp_congestion, &args);
    for (const auto& [name, value] : ReconnectArgs(connect_timeout)) args.SetInt(name, value);
    auto channel = grpc::CreateCustomChannel(address, credentials_, args);
    auto stub = std::make_shared<Stub>();
    stub->server_id = server_id_;
    stub->proto = wire::ParameterService::NewStub(channel);
    stub->raw = std::make_unique<grpc::GenericStub>(channel);
    stub->channel = std::move(channel);
    stub->own_channel_refs = stub->channel.use_count();
    stubs.push_back(std::move(stub));
  }
  return stubs;
}

std::shared_ptr<Stub> ServerConnection::StubFor(Lane lane) {
  absl::MutexLock lock(&stubs_mu_);
  size_t n = stubs_.size();
  if (options_.UsesFirstWeightsLane()) {
    if (lane == Lane::kFirstWeights) return stubs_.back();
    --n;  // the others share the channels before it
  }
  if (n == 1 || lane == Lane::kPushes) return stubs_[0];
  std::atomic<size_t>& next = lane == Lane::kFetches ? next_fetch_stub_ : next_other_stub_;
  return stubs_[1 + next.fetch_add(1) % (n - 1)];
}

std::string ServerConnection::address() const {
  absl::MutexLock lock(&stubs_mu_);
  return address_;
}

void ServerConnection::Repoint(const std::string& address) {
  std::vector<std::shared_ptr<Stub>> stubs = MakeStubs(address, kConnectTimeout);
  std::string was;
  {
    absl::MutexLock lock(&stubs_mu_);
    if (address == address_) return Retire(std::move(stubs));
    was = std::exchange(address_, address);
    ReplaceStubs(std::move(stubs), kConnectTimeout);  // a new place: its handshakes are not known to be slow
  }
  spdlog::warn("server {} joined the job at a new address, {} (was {}): its calls go there", server_id_, address, was);
}

void ServerConnection::ReplaceStubs(std::vector<std::shared_ptr<Stub>> fresh, absl::Duration connect_timeout) {
  stubs_.swap(fresh);
  if (connect_timeout != connect_timeout_) {
    connect_timeout_ = connect_timeout;
    connect_timeout_since_ = clock_->Now();
  }
  Retire(std::move(fresh));
}

void ServerConnection::Retire(std::vector<std::shared_ptr<Stub>> stubs) {
  // Not dropped here: this may run on a gRPC callback thread, and a
  // channel's last reference going there shuts down the callback queue it
  // runs on (grpc_cq_internal_unref aborted in tests/chaos:slow_link_test).
  retired_.insert(retired_.end(), std::make_move_iterator(stubs.begin()), std::make_move_iterator(stubs.end()));
}

void ServerConnection::CloseIdleRetired() {
  std::vector<std::shared_ptr<Stub>> idle;
  {
    absl::MutexLock lock(&stubs_mu_);
    // A retired stub is never handed out again: once no attempt holds it and
    // no call's context holds its channel, nothing can.
    auto held = [](const std::shared_ptr<Stub>& s) {
      return s.use_count() > 1 || s->channel.use_count() > s->own_channel_refs;
    };
    auto first_idle = std::stable_partition(retired_.begin(), retired_.end(), held);
    idle.assign(std::make_move_iterator(first_idle), std::make_move_iterator(retired_.end()));
    retired_.erase(first_idle, retired_.end());
  }
  // `idle` goes here, on the heartbeat thread.
}

size_t ServerConnection::retired_stubs() const {
  absl::MutexLock lock(&stubs_mu_);
  return retired_.size();
}

void ServerConnection::Renew() {
  const std::string address = this->address();
  // A server live again: its handshakes start from the first timeout.
  std::vector<std::shared_ptr<Stub>> stubs = MakeStubs(address, kConnectTimeout);
  absl::MutexLock lock(&stubs_mu_);
  if (address_ != address) return Retire(std::move(stubs));  // Repoint made new ones meanwhile
  ReplaceStubs(std::move(stubs), kConnectTimeout);
}

void ServerConnection::NoteFailedConnect(const absl::Status& status, absl::Time first_failure, absl::Time now) {
  // gRPC's words (1.51) for calls that found no connection because its
  // handshake took too long. Were they to change, timeouts would only stay
  // as they are. A refused connection reads "Connection refused".
  const absl::string_view m = status.message();
  const bool timed_out = absl::StrContains(m, "timed out") || absl::StrContains(m, "Timeout occurred") ||
                         absl::StrContains(m, "handshaker shutdown");
  if (!absl::StrContains(m, "failed to connect") || !timed_out) return;
  std::string address;
  absl::Duration longer;
  {
    absl::MutexLock lock(&stubs_mu_);
    // Failing all along, and for three of the current timeouts.
    const absl::Time since = std::max(first_failure, connect_timeout_since_);
    if (connect_timeout_ >= kMaxConnectTimeout || now - since < kConnectAttemptsBeforeLonger * connect_timeout_) return;
    longer = LongerConnectTimeout(connect_timeout_);
    connect_timeout_since_ = now;  // no other call lengthens it meanwhile
    address = address_;
  }
  spdlog::warn("server {} at {}: its handshakes have timed out for {:.1f} s; connection attempts now wait {}",
               server_id_, address, absl::ToDoubleSeconds(now - first_failure), absl::FormatDuration(longer));
  std::vector<std::shared_ptr<Stub>> stubs = MakeStubs(address, longer);
  absl::MutexLock lock(&stubs_mu_);
  if (address_ != address || connect_timeout_ >= longer) return Retire(std::move(stubs));  // newer ones were made
  ReplaceStubs(std::move(stubs), longer);
}

}  // namespace shardps
