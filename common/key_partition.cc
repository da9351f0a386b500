#include "common/key_partition.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardps {

std::string KeyName(const ChunkKey& key) {
  return absl::StrCat("(tensor ", key.tensor, ", chunk ", key.chunk, ")");
}

absl::StatusOr<KeyMap> KeyMap::Build(const Layout& layout, int num_servers,
                                     int64_t partition_bytes) {
  if (num_servers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers is ", num_servers, "; want >= 1"));
  }
  if (partition_bytes < 4 || partition_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition_bytes is ", partition_bytes, "; want a positive multiple of 4"));
  }
  const int64_t chunk_elems = partition_bytes / 4;
  int64_t keys = 0;
  for (const TensorSpec& t : layout.tensors) {
    const int64_t n = t.NumElements();
    if (n <= 0 || n > kMaxLayoutValues) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " has ", n, " values; want 1..2^40"));
    }
    keys += (n + chunk_elems - 1) / chunk_elems;
    if (keys > kMaxKeys) {
      return absl::InvalidArgumentError(absl::StrCat("the layout makes more than ", kMaxKeys, " keys of ",
                                                     partition_bytes, " bytes; raise partition_bytes"));
    }
  }
  KeyMap map;
  map.layout_ = layout;
  map.num_servers_ = num_servers;
  map.partition_bytes_ = partition_bytes;
  for (uint32_t t = 0; t < layout.tensors.size(); ++t) {
    map.first_chunk_of_tensor_.push_back(map.chunks_.size());
    const int64_t n = layout.tensors[t].NumElements();
    uint32_t c = 0;
    for (int64_t off = 0; off < n; off += chunk_elems, ++c) {
      map.chunks_.push_back(ChunkInfo{{t, c}, off, std::min(chunk_elems, n - off), 0});
    }
  }
  map.first_chunk_of_tensor_.push_back(map.chunks_.size());

  // Largest chunk first (equal sizes in key order) onto the least-loaded
  // server, ties to the lower server id.
  std::vector<size_t> order(map.chunks_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return map.chunks_[a].length > map.chunks_[b].length;
  });
  map.server_bytes_.assign(num_servers, 0);
  for (size_t i : order) {
    const int s = static_cast<int>(
        std::min_element(map.server_bytes_.begin(), map.server_bytes_.end()) -
        map.server_bytes_.begin());
    map.chunks_[i].server = s;
    map.server_bytes_[s] += map.chunks_[i].length * 4;
  }
  return map;
}

std::vector<ChunkInfo> KeyMap::ChunksOfTensor(uint32_t tensor) const {
  return {chunks_.begin() + first_chunk_of_tensor_[tensor],
          chunks_.begin() + first_chunk_of_tensor_[tensor + 1]};
}

std::vector<ChunkInfo> KeyMap::ChunksOfServer(int server) const {
  std::vector<ChunkInfo> out;
  for (const ChunkInfo& c : chunks_) {
    if (c.server == server) out.push_back(c);
  }
  return out;
}

const ChunkInfo* KeyMap::Find(const ChunkKey& key) const {
  if (key.tensor >= layout_.tensors.size()) return nullptr;
  const size_t index = first_chunk_of_tensor_[key.tensor] + key.chunk;
  if (index >= first_chunk_of_tensor_[key.tensor + 1]) return nullptr;
  return &chunks_[index];
}

int64_t KeyMap::BytesOfServer(int server) const {
  return server >= 0 && server < num_servers_ ? server_bytes_[server] : 0;
}

}  // namespace shardps
