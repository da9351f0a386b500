#include "common/moved_servers.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/replica_map.h"

namespace shardps {

namespace {
constexpr size_t kMaxAddressBytes = 255;
}  // namespace

bool MovedServers::IsValid(int server, uint32_t generation, absl::string_view address) const {
  if (server < 0 || server >= std::min(num_servers_, kMaxReplicatedServers)) return false;
  if (generation % 3 != 2 || generation > kMaxGeneration) return false;  // a joining one
  if (address.empty() || address.size() > kMaxAddressBytes) return false;
  return std::all_of(address.begin(), address.end(), [](char c) { return c > ' ' && c < 127 && c != ';'; });
}

bool MovedServers::Note(int server, uint32_t generation, const std::string& address) {
  absl::MutexLock lock(&mu_);
  return NoteLocked(server, generation, address);
}

bool MovedServers::NoteLocked(int server, uint32_t generation, const std::string& address) {
  if (!IsValid(server, generation, address)) return false;
  auto it = entries_.find(server);
  if (it != entries_.end() && it->second.generation >= generation) return false;
  std::map<int, Entry> next = entries_;
  next[server] = Entry{generation, address};
  std::vector<std::string> parts;
  for (const auto& [s, e] : next) parts.push_back(absl::StrCat(s, "=", e.generation, "@", e.address));
  std::string text = absl::StrJoin(parts, ";");
  if (text.size() > kMaxTextBytes) return false;
  const bool changed = it == entries_.end() || it->second.address != address;
  entries_ = std::move(next);
  text_ = std::move(text);
  any_.store(true, std::memory_order_release);
  return changed;
}

std::optional<std::vector<int>> MovedServers::Merge(absl::string_view text) {
  struct Parsed {
    int server = 0;
    uint32_t generation = 0;
    std::string address;
  };
  // The same text again (every call carries it): nothing to parse.
  if (text == Text()) return std::vector<int>{};
  std::vector<Parsed> parsed;
  if (text.size() > kMaxTextBytes) return std::nullopt;
  if (!text.empty()) {
    const std::vector<absl::string_view> parts = absl::StrSplit(text, ';');
    if (parts.size() > kMaxReplicatedServers) return std::nullopt;
    for (absl::string_view part : parts) {
      const size_t eq = part.find('='), at = part.find('@');
      if (eq == absl::string_view::npos || at == absl::string_view::npos || at < eq) return std::nullopt;
      Parsed p;
      const absl::string_view id = part.substr(0, eq), gen = part.substr(eq + 1, at - eq - 1);
      auto digits = [](absl::string_view d) {
        return !d.empty() && d.size() <= 10 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
      };
      if (!digits(id) || !digits(gen) || !absl::SimpleAtoi(id, &p.server) || !absl::SimpleAtoi(gen, &p.generation)) {
        return std::nullopt;
      }
      p.address = std::string(part.substr(at + 1));
      if (!IsValid(p.server, p.generation, p.address)) return std::nullopt;
      parsed.push_back(std::move(p));
    }
  }
  std::vector<int> changed;
  absl::MutexLock lock(&mu_);
  for (const Parsed& p : parsed) {
    if (NoteLocked(p.server, p.generation, p.address)) changed.push_back(p.server);
  }
  return changed;
}

std::optional<std::string> MovedServers::AddressOf(int server) const {
  if (!any_.load(std::memory_order_acquire)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(server);
  if (it == entries_.end()) return std::nullopt;
  return it->second.address;
}

std::vector<std::string> MovedServers::Apply(std::vector<std::string> addresses) const {
  if (!any_.load(std::memory_order_acquire)) return addresses;
  absl::MutexLock lock(&mu_);
  for (const auto& [s, e] : entries_) {
    if (s < static_cast<int>(addresses.size())) addresses[s] = e.address;
  }
  return addresses;
}

std::string MovedServers::Text() const {
  if (!any_.load(std::memory_order_acquire)) return "";
  absl::MutexLock lock(&mu_);
  return text_;
}

}  // namespace shardps
