#include "common/layout.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t Layout::TotalBytes() const {
  int64_t bytes = 0;
  for (const TensorSpec& t : tensors) bytes += t.NumElements() * 4;
  return bytes;
}

namespace {
constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

void HashBytes(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
}
}  // namespace

uint64_t LayoutHash(const Layout& layout) {
  uint64_t h = kFnvOffset;
  for (const TensorSpec& t : layout.tensors) {
    HashBytes(h, t.name.data(), t.name.size());
    const uint64_t rank = t.dims.size();
    HashBytes(h, &rank, sizeof(rank));
    for (int64_t d : t.dims) HashBytes(h, &d, sizeof(d));
  }
  return h;
}

std::string LayoutDebugString(const Layout& layout) {
  std::vector<std::string> parts;
  for (const TensorSpec& t : layout.tensors) {
    parts.push_back(absl::StrCat(t.name, "[", absl::StrJoin(t.dims, ","), "]"));
  }
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<Layout> LayoutFromProto(const wire::Layout& proto) {
  if (proto.tensors_size() == 0) {
    return absl::InvalidArgumentError("layout has no tensors");
  }
  Layout layout;
  for (int i = 0; i < proto.tensors_size(); ++i) {
    const wire::TensorSpec& t = proto.tensors(i);
    if (t.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " has no name"));
    }
    if (t.dims_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name(), " has no dimensions"));
    }
    for (char c : t.name()) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' &&
          c != '-') {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor name '", t.name(), "' has character '", std::string(1, c),
            "'; want letters, digits, '_', '.', '/' or '-'"));
      }
    }
    TensorSpec spec{t.name(), {t.dims().begin(), t.dims().end()}};
    for (int64_t d : spec.dims) {
      if (d <= 0 || d > (int64_t{1} << 40)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t.name(), " has dimension ", d, "; want 1..2^40"));
      }
    }
    layout.tensors.push_back(std::move(spec));
  }
  return layout;
}

wire::Layout LayoutToProto(const Layout& layout) {
  wire::Layout proto;
  for (const TensorSpec& t : layout.tensors) {
    wire::TensorSpec* spec = proto.add_tensors();
    spec->set_name(t.name);
    for (int64_t d : t.dims) spec->add_dims(d);
  }
  return proto;
}

}  // namespace shardps
