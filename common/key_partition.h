// Keys and sharding (DESIGN.md, "Keys and sharding").
//
// Each tensor of a layout is cut into chunks of at most `partition_bytes`; a
// chunk is a key (tensor index, chunk index). Keys go to servers by a
// deterministic bytes-balanced rule: largest chunk first onto the least-loaded
// server, ties to the lower server id (and equal chunks in key order). Every
// process computes the same KeyMap from the same inputs.
//
// KeyMap is immutable after Build(); safe to share between threads.
#ifndef SHARDPS_COMMON_KEY_PARTITION_H_
#define SHARDPS_COMMON_KEY_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"

namespace shardps {

struct ChunkKey {
  uint32_t tensor = 0;
  uint32_t chunk = 0;

  bool operator==(const ChunkKey& o) const { return tensor == o.tensor && chunk == o.chunk; }
  bool operator<(const ChunkKey& o) const {
    return tensor != o.tensor ? tensor < o.tensor : chunk < o.chunk;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ChunkKey& k) {
    return H::combine(std::move(h), k.tensor, k.chunk);
  }
};

std::string KeyName(const ChunkKey& key);  // "(tensor 3, chunk 1)"

struct ChunkInfo {
  ChunkKey key;
  int64_t offset = 0;  // first element of the chunk inside its tensor.
  int64_t length = 0;  // elements.
  int server = 0;      // owning server id.
};

// The most keys a KeyMap holds (each costs every process of the job some
// 40 bytes): a larger model needs larger partitions.
inline constexpr int64_t kMaxKeys = int64_t{1} << 26;

class KeyMap {
 public:
  // REQUIRES nothing; INVALID_ARGUMENT when num_servers < 1 or partition_bytes
  // is not a positive multiple of 4, or when the layout would make more than
  // kMaxKeys keys (counted before any is built).
  static absl::StatusOr<KeyMap> Build(const Layout& layout, int num_servers,
                                      int64_t partition_bytes);

  int num_servers() const { return num_servers_; }
  int64_t partition_bytes() const { return partition_bytes_; }
  const Layout& layout() const { return layout_; }

  // All chunks, in key order (tensor, then chunk).
  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  // Chunks of tensor t, in chunk order. REQUIRES: t < number of tensors.
  std::vector<ChunkInfo> ChunksOfTensor(uint32_t tensor) const;
  // Chunks owned by server s, in key order.
  std::vector<ChunkInfo> ChunksOfServer(int server) const;
  // nullptr when the key is not in the layout.
  const ChunkInfo* Find(const ChunkKey& key) const;
  int64_t BytesOfServer(int server) const;

 private:
  KeyMap() = default;

  Layout layout_;
  int num_servers_ = 0;
  int64_t partition_bytes_ = 0;
  std::vector<ChunkInfo> chunks_;
  std::vector<size_t> first_chunk_of_tensor_;  // index into chunks_.
  std::vector<int64_t> server_bytes_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_KEY_PARTITION_H_
