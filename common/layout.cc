#include "common/layout.h"

#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

int64_t TensorSpec::NumElements() const {
  // Saturating: dims from a peer or a file may multiply past int64.
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) return std::numeric_limits<int64_t>::max();
    n *= d;
  }
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
  // Tables only add to the hash, so a dense layout keeps its hash (and its
  // checkpoints) from before tables existed.
  for (const TableSpec& t : layout.tables) {
    HashBytes(h, "table", 5);
    HashBytes(h, t.name.data(), t.name.size());
    const int64_t fields[] = {t.dim, t.vocab, static_cast<int64_t>(t.optimizer)};
    HashBytes(h, fields, sizeof(fields));
    HashBytes(h, &t.init_scale, sizeof(t.init_scale));
    HashBytes(h, &t.lr, sizeof(t.lr));
    HashBytes(h, &t.seed, sizeof(t.seed));
  }
  return h;
}

std::string LayoutDebugString(const Layout& layout) {
  std::vector<std::string> parts;
  for (const TensorSpec& t : layout.tensors) {
    parts.push_back(absl::StrCat(t.name, "[", absl::StrJoin(t.dims, ","), "]"));
  }
  for (const TableSpec& t : layout.tables) {
    parts.push_back(absl::StrCat(t.name, "{rows x ", t.dim, t.vocab > 0 ? absl::StrCat(", ", t.vocab, " ids") : "", "}"));
  }
  return absl::StrJoin(parts, " ");
}

namespace {
absl::Status CheckName(const std::string& name) {
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' has character '", std::string(1, c),
                                                     "'; want letters, digits, '_', '.', '/' or '-'"));
    }
  }
  return absl::OkStatus();
}

absl::Status AddTables(const wire::Layout& proto, Layout& layout) {
  absl::flat_hash_set<std::string> names;
  for (const TensorSpec& t : layout.tensors) names.insert(t.name);
  for (const wire::TableSpec& t : proto.tables()) {
    absl::StatusOr<TableSpec> spec = TableSpecFromProto(t);
    if (!spec.ok()) return spec.status();
    if (absl::Status s = CheckName(spec->name); !s.ok()) return s;
    if (!names.insert(spec->name).second) {
      return absl::InvalidArgumentError(absl::StrCat("table name '", spec->name, "' is used twice in the layout"));
    }
    layout.tables.push_back(*std::move(spec));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<Layout> LayoutFromProto(const wire::Layout& proto) {
  if (proto.tensors_size() == 0) {
    return absl::InvalidArgumentError("layout has no tensors");
  }
  Layout layout;
  int64_t values = 0;  // of the tensors so far
  for (int i = 0; i < proto.tensors_size(); ++i) {
    const wire::TensorSpec& t = proto.tensors(i);
    if (t.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, " has no name"));
    }
    if (t.dims_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name(), " has no dimensions"));
    }
    if (absl::Status s = CheckName(t.name()); !s.ok()) return s;
    TensorSpec spec{t.name(), {t.dims().begin(), t.dims().end()}};
    int64_t n = 1;  // checked before each product, so it never overflows
    for (int64_t d : spec.dims) {
      if (d <= 0 || d > kMaxLayoutValues) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t.name(), " has dimension ", d, "; want 1..2^40"));
      }
      if (n > kMaxLayoutValues / d) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name(), " has more than 2^40 values"));
      }
      n *= d;
    }
    if (values > kMaxLayoutValues - n) {
      return absl::InvalidArgumentError(
          absl::StrCat("the layout's tensors hold more than 2^40 values together (at tensor ", t.name(), ")"));
    }
    values += n;
    layout.tensors.push_back(std::move(spec));
  }
  if (absl::Status s = AddTables(proto, layout); !s.ok()) return s;
  return layout;
}

wire::Layout LayoutToProto(const Layout& layout) {
  wire::Layout proto;
  for (const TensorSpec& t : layout.tensors) {
    wire::TensorSpec* spec = proto.add_tensors();
    spec->set_name(t.name);
    for (int64_t d : t.dims) spec->add_dims(d);
  }
  for (const TableSpec& t : layout.tables) *proto.add_tables() = TableSpecToProto(t);
  return proto;
}

}  // namespace shardps
