#include "server/reshard.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/key_partition.h"
#include "common/table_spec.h"
#include "server/model_export.h"
#include "server/sparse/row_optimizer.h"

namespace shardps {
namespace {

// One dense tensor whole: its weights, each slot, and each element's version.
struct WholeTensor {
  std::vector<float> weights;
  std::vector<std::vector<float>> slots;
  std::vector<int64_t> versions;
};

// Every tensor of the layout put together from the old shards' keys.
absl::StatusOr<std::vector<WholeTensor>> Assemble(const std::vector<ShardSnapshot>& old) {
  const ShardSnapshot& first = old.front();
  // Every key the shards hold is the layout's, and every key is held.
  absl::StatusOr<KeyMap> map = CoveredKeyMap(old);
  if (!map.ok()) return map.status();
  std::vector<WholeTensor> whole(first.layout.tensors.size());
  for (size_t t = 0; t < whole.size(); ++t) {
    const size_t n = static_cast<size_t>(first.layout.tensors[t].NumElements());
    whole[t].weights.assign(n, 0.0f);
    whole[t].versions.assign(n, -1);
  }
  for (const ShardSnapshot& shard : old) {
    for (const KeySnapshot& k : shard.keys) {
      const ChunkInfo* info = map->Find(k.key);
      WholeTensor& w = whole[k.key.tensor];
      if (w.slots.size() < k.slots.size()) w.slots.resize(k.slots.size(), std::vector<float>(w.weights.size()));
      std::copy(k.weights.begin(), k.weights.end(), w.weights.begin() + info->offset);
      for (size_t s = 0; s < k.slots.size(); ++s) {
        std::copy(k.slots[s].begin(), k.slots[s].end(), w.slots[s].begin() + info->offset);
      }
      std::fill_n(w.versions.begin() + info->offset, info->length, k.version);
    }
  }
  return whole;
}

// The new shards' headers, copied from the old first one.
std::vector<ShardSnapshot> Headers(const std::vector<ShardSnapshot>& old, int num_servers) {
  std::vector<int64_t> clocks = old.front().clocks;
  for (const ShardSnapshot& s : old) {
    for (size_t r = 0; r < clocks.size() && r < s.clocks.size(); ++r) clocks[r] = std::min(clocks[r], s.clocks[r]);
  }
  std::vector<ShardSnapshot> out(num_servers);
  for (int j = 0; j < num_servers; ++j) {
    ShardSnapshot& s = out[j];
    const ShardSnapshot& from = old.front();
    s.server_id = j;
    s.num_servers = num_servers;
    s.mode = from.mode;
    s.layout = from.layout;
    s.partition_bytes = from.partition_bytes;
    s.optimizer = from.optimizer;
    s.pushes_per_step = from.pushes_per_step;
    s.step = from.step;
    s.timeline = from.timeline;
    s.clocks = clocks;
    s.tables.resize(from.layout.tables.size());
  }
  return out;
}

// Every old part of every table, each row to the server its id hashes to.
void SpreadRows(const std::vector<ShardSnapshot>& old, std::vector<ShardSnapshot>& out) {
  const int num_servers = static_cast<int>(out.size());
  const Layout& layout = old.front().layout;
  for (size_t t = 0; t < layout.tables.size(); ++t) {
    const size_t dim = static_cast<size_t>(layout.tables[t].dim);
    const size_t slots = static_cast<size_t>(RowSlotFloats(layout.tables[t].optimizer, layout.tables[t].dim));
    for (const ShardSnapshot& shard : old) {
      if (t >= shard.tables.size()) continue;
      const TableSnapshot& part = shard.tables[t];
      for (ShardSnapshot& s : out) s.tables[t].version = std::max(s.tables[t].version, part.version);
      for (size_t r = 0; r < part.ids.size(); ++r) {
        TableSnapshot& to = out[RowServer(part.ids[r], num_servers)].tables[t];
        to.ids.push_back(part.ids[r]);
        to.rows.insert(to.rows.end(), part.rows.begin() + r * dim, part.rows.begin() + (r + 1) * dim);
        to.slots.insert(to.slots.end(), part.slots.begin() + r * slots, part.slots.begin() + (r + 1) * slots);
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<ShardSnapshot>> Reshard(const std::vector<ShardSnapshot>& old, int num_servers) {
  if (num_servers < 1) return absl::InvalidArgumentError(absl::StrCat("servers is ", num_servers, "; want >= 1"));
  if (old.empty()) return absl::FailedPreconditionError("no shards to reshard");
  absl::StatusOr<std::vector<WholeTensor>> whole = Assemble(old);
  if (!whole.ok()) return whole.status();
  absl::StatusOr<KeyMap> map = KeyMap::Build(old.front().layout, num_servers, old.front().partition_bytes);
  if (!map.ok()) return map.status();
  std::vector<ShardSnapshot> out = Headers(old, num_servers);
  for (const ChunkInfo& c : map->chunks()) {
    const WholeTensor& w = (*whole)[c.key.tensor];
    KeySnapshot k;
    k.key = c.key;
    k.version = *std::max_element(w.versions.begin() + c.offset, w.versions.begin() + c.offset + c.length);
    k.weights.assign(w.weights.begin() + c.offset, w.weights.begin() + c.offset + c.length);
    for (const std::vector<float>& slot : w.slots) {
      k.slots.emplace_back(slot.begin() + c.offset, slot.begin() + c.offset + c.length);
    }
    out[c.server].keys.push_back(std::move(k));
  }
  SpreadRows(old, out);
  return out;
}

absl::StatusOr<int64_t> ReshardCheckpoint(const std::string& dir, std::optional<int64_t> step, int num_servers,
                                          const std::string& out_dir) {
  std::error_code error;
  if (std::filesystem::equivalent(dir, out_dir, error)) {
    return absl::InvalidArgumentError(absl::StrCat("write the resharded checkpoint into another directory than ", dir));
  }
  absl::StatusOr<std::vector<ShardSnapshot>> old = ReadShards(dir, step);
  if (!old.ok()) return old.status();
  absl::StatusOr<std::vector<ShardSnapshot>> shards = Reshard(*old, num_servers);
  if (!shards.ok()) {  // naming the checkpoint, as the read's errors do
    return absl::Status(shards.status().code(), absl::StrCat(dir, ", step ", old->front().step, ": ",
                                                             shards.status().message()));
  }
  std::filesystem::create_directories(out_dir, error);
  if (error) return absl::PermissionDeniedError(absl::StrCat("cannot create ", out_dir, ": ", error.message()));
  for (const ShardSnapshot& s : *shards) {
    if (absl::Status written = WriteShardCheckpoint(ShardCheckpointPath(out_dir, s.server_id, num_servers, s.step), s);
        !written.ok()) {
      return written;
    }
  }
  return shards->front().step;
}

}  // namespace shardps
