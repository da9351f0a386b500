// The model layout: an ordered list of named float32 tensors, shared by every
// process of a job. Pure values; thread-compatible.
#ifndef SHARDPS_COMMON_LAYOUT_H_
#define SHARDPS_COMMON_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/table_spec.h"
#include "proto/shardps.pb.h"

namespace shardps {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> dims;

  // The product of dims; -1 with a negative dim, INT64_MAX past it.
  int64_t NumElements() const;
  bool operator==(const TensorSpec& other) const {
    return name == other.name && dims == other.dims;
  }
};

// The most values a layout's dense tensors may hold together (4 TiB of
// float32): LayoutFromProto refuses more, so element counts never overflow.
inline constexpr int64_t kMaxLayoutValues = int64_t{1} << 40;

struct Layout {
  std::vector<TensorSpec> tensors;
  std::vector<TableSpec> tables;  // sparse tables (common/table_spec.h)

  int64_t TotalBytes() const;  // of the dense tensors
  bool operator==(const Layout& other) const { return tensors == other.tensors && tables == other.tables; }
  bool operator!=(const Layout& other) const { return !(*this == other); }
};

// A stable 64-bit fingerprint of names and shapes (FNV-1a); every process of a
// job computes the same value for the same layout.
uint64_t LayoutHash(const Layout& layout);

// Short human-readable form, "w1[784,256] b1[256]", for logs and errors.
std::string LayoutDebugString(const Layout& layout);

// Converts from the wire; INVALID_ARGUMENT on an empty layout (no tensor),
// an empty or repeated name, a dimension that is not positive, or a table
// that CheckTableSpec() refuses.
absl::StatusOr<Layout> LayoutFromProto(const wire::Layout& proto);
wire::Layout LayoutToProto(const Layout& layout);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAYOUT_H_
