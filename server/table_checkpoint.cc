#include "server/table_checkpoint.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/sparse/row_optimizer.h"

namespace shardps {
namespace {

std::string FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return absl::StrCat(absl::Hex(bits));
}

bool ParseFloatBits(absl::string_view text, float* out) {
  uint32_t bits;
  if (!absl::SimpleHexAtoi(text, &bits)) return false;
  std::memcpy(out, &bits, 4);
  return true;
}

}  // namespace

std::string EncodeTables(const std::vector<TableSpec>& tables) {
  std::vector<std::string> parts;
  for (const TableSpec& t : tables) {
    parts.push_back(absl::StrCat(t.name, ":", t.dim, ":", t.vocab, ":", FloatBits(t.init_scale), ":",
                                 RowOptimizerName(t.optimizer), ":", FloatBits(t.lr), ":", t.seed));
  }
  return absl::StrJoin(parts, ";");
}

absl::StatusOr<std::vector<TableSpec>> DecodeTables(const std::string& text) {
  std::vector<TableSpec> tables;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(part, ':');
    TableSpec t;
    absl::StatusOr<RowOptimizerKind> kind = f.size() == 7 ? ParseRowOptimizer(f[4]) : absl::InvalidArgumentError("");
    if (!kind.ok() || !absl::SimpleAtoi(f[1], &t.dim) || !absl::SimpleAtoi(f[2], &t.vocab) ||
        !ParseFloatBits(f[3], &t.init_scale) || !ParseFloatBits(f[5], &t.lr) || !absl::SimpleAtoi(f[6], &t.seed)) {
      return absl::DataLossError(absl::StrCat("bad table entry '", part, "'"));
    }
    t.name = f[0];
    t.optimizer = *kind;
    tables.push_back(std::move(t));
  }
  return tables;
}

void AddTableTensors(const std::vector<TableSpec>& tables, const std::vector<TableSnapshot>& snapshots,
                     std::vector<TensorView>& tensors, std::map<std::string, std::string>& metadata) {
  std::vector<int64_t> versions;
  for (size_t i = 0; i < tables.size() && i < snapshots.size(); ++i) {
    const TableSpec& t = tables[i];
    const TableSnapshot& s = snapshots[i];
    const int64_t n = static_cast<int64_t>(s.ids.size());
    const int slots = RowSlotFloats(t.optimizer, t.dim);
    versions.push_back(s.version);
    tensors.push_back({t.name + ".ids", {n}, {}, s.ids, /*is_int=*/true});
    tensors.push_back({t.name + ".rows", {n, t.dim}, s.rows, {}});
    if (slots > 0) tensors.push_back({t.name + ".slots", {n, slots}, s.slots, {}});
  }
  metadata["table_versions"] = absl::StrJoin(versions, ",");
}

absl::StatusOr<std::vector<TableSnapshot>> ReadTableTensors(const std::vector<TableSpec>& tables,
                                                            SafetensorsFile& file) {
  std::vector<int64_t> versions;
  auto meta = file.metadata.find("table_versions");
  for (absl::string_view v : absl::StrSplit(meta == file.metadata.end() ? "" : meta->second, ',', absl::SkipEmpty())) {
    int64_t version;
    if (!absl::SimpleAtoi(v, &version)) return absl::DataLossError(absl::StrCat("bad table version '", v, "'"));
    versions.push_back(version);
  }
  if (versions.size() != tables.size()) {
    return absl::DataLossError(absl::StrCat(versions.size(), " table versions for ", tables.size(), " tables"));
  }
  std::vector<TableSnapshot> out;
  for (size_t i = 0; i < tables.size(); ++i) {
    const TableSpec& t = tables[i];
    TableSnapshot s;
    s.version = versions[i];
    auto ids = file.tensors.find(t.name + ".ids");
    auto rows = file.tensors.find(t.name + ".rows");
    if (ids == file.tensors.end() || !ids->second.is_int || rows == file.tensors.end() || rows->second.is_int) {
      return absl::DataLossError(absl::StrCat("table '", t.name, "' lacks its ids or rows"));
    }
    s.ids = std::move(ids->second.ints);
    s.rows = std::move(rows->second.values);
    const size_t slots = static_cast<size_t>(RowSlotFloats(t.optimizer, t.dim));
    if (auto sl = file.tensors.find(t.name + ".slots"); sl != file.tensors.end()) s.slots = std::move(sl->second.values);
    if (s.rows.size() != s.ids.size() * t.dim || s.slots.size() != s.ids.size() * slots) {
      return absl::DataLossError(absl::StrCat("table '", t.name, "': ", s.ids.size(), " ids but ", s.rows.size(),
                                              " row values and ", s.slots.size(), " slot values"));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace shardps
