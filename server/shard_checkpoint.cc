#include "server/shard_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/safetensors.h"

namespace shardps {
namespace {

constexpr char kFormat[] = "shardps-shard-v1";

// "name=d1,d2;name2=d3". Names cannot hold ';' or '=' (LayoutFromProto).
std::string EncodeLayout(const Layout& layout) {
  std::vector<std::string> parts;
  for (const TensorSpec& t : layout.tensors) {
    parts.push_back(absl::StrCat(t.name, "=", absl::StrJoin(t.dims, ",")));
  }
  return absl::StrJoin(parts, ";");
}

// Held to what a job may declare (LayoutFromProto: every dimension and the
// total at most 2^40 values), so that a damaged file's layout cannot size
// an allocation past what any job could have written.
absl::StatusOr<Layout> DecodeLayout(const std::string& text) {
  wire::Layout proto;
  for (absl::string_view part : absl::StrSplit(text, ';')) {
    std::vector<std::string> name_dims = absl::StrSplit(part, '=');
    if (name_dims.size() != 2) return absl::DataLossError(absl::StrCat("bad layout entry '", part, "'"));
    wire::TensorSpec* spec = proto.add_tensors();
    spec->set_name(name_dims[0]);
    for (absl::string_view d : absl::StrSplit(name_dims[1], ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(d, &v) || v <= 0) return absl::DataLossError(absl::StrCat("bad dimension '", d, "'"));
      spec->add_dims(v);
    }
  }
  absl::StatusOr<Layout> layout = LayoutFromProto(proto);
  if (!layout.ok()) return absl::DataLossError(absl::StrCat("bad layout: ", layout.status().message()));
  return layout;
}

absl::StatusOr<int64_t> MetaInt(const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  int64_t v;
  if (it == meta.end() || !absl::SimpleAtoi(it->second, &v)) {
    return absl::DataLossError(absl::StrCat("checkpoint metadata lacks integer '", key, "'"));
  }
  return v;
}

}  // namespace

namespace {
// "shard-<id>-of-<n>-step-<step>.safetensors": the one spelling written and read.
std::string ShardCheckpointFileName(int server_id, int num_servers, int64_t step) {
  return absl::StrCat("shard-", server_id, "-of-", num_servers, "-step-", step, ".safetensors");
}
}  // namespace

std::string ShardCheckpointPath(const std::string& dir, int server_id, int num_servers, int64_t step) {
  return absl::StrCat(dir, "/", ShardCheckpointFileName(server_id, num_servers, step));
}

std::optional<ShardCheckpointName> ParseShardCheckpointName(absl::string_view file_name) {
  absl::string_view rest = file_name;
  if (!absl::ConsumePrefix(&rest, "shard-") || !absl::ConsumeSuffix(&rest, ".safetensors")) return std::nullopt;
  const size_t of = rest.find("-of-"), step = rest.find("-step-");
  if (of == absl::string_view::npos || step == absl::string_view::npos || step < of) return std::nullopt;
  ShardCheckpointName n;
  if (!absl::SimpleAtoi(rest.substr(0, of), &n.server_id) ||
      !absl::SimpleAtoi(rest.substr(of + 4, step - of - 4), &n.num_servers) ||
      !absl::SimpleAtoi(rest.substr(step + 6), &n.step)) {
    return std::nullopt;
  }
  // Only the spelling ShardCheckpointPath writes: no sign, no leading zero.
  if (ShardCheckpointFileName(n.server_id, n.num_servers, n.step) != file_name || n.server_id < 0 ||
      n.num_servers < 1 || n.step < 0) {
    return std::nullopt;
  }
  return n;
}

std::string CheckpointOfOtherServerCount(const std::string& dir, int num_servers) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const std::optional<ShardCheckpointName> n = ParseShardCheckpointName(name);
    if (n.has_value() && n->num_servers != num_servers) return name;
  }
  return "";
}

std::vector<int64_t> ListCheckpointSteps(const std::string& dir, int server_id, int num_servers) {
  std::vector<int64_t> steps;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::optional<ShardCheckpointName> n = ParseShardCheckpointName(entry.path().filename().string());
    if (n.has_value() && n->server_id == server_id && n->num_servers == num_servers) steps.push_back(n->step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status CheckShardHolds(const KeyMap& map, const std::vector<int>& held, const ShardSnapshot& shard,
                             const std::string& source) {
  int64_t keys = 0, values = 0;
  for (const ChunkInfo& c : map.chunks()) {
    if (std::find(held.begin(), held.end(), c.server) == held.end()) continue;
    ++keys;
    values += c.length;
  }
  int64_t have = 0;
  for (const KeySnapshot& k : shard.keys) have += static_cast<int64_t>(k.weights.size());
  if (keys == static_cast<int64_t>(shard.keys.size()) && values == have) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(source, " holds ", shard.keys.size(), " keys of ", have,
                                          " values; its layout gives this server ", keys, " keys of ", values));
}

absl::StatusOr<KeyMap> CoveredKeyMap(const std::vector<ShardSnapshot>& shards) {
  const ShardSnapshot& first = shards.front();
  absl::StatusOr<KeyMap> map = KeyMap::Build(first.layout, static_cast<int>(shards.size()), first.partition_bytes);
  if (!map.ok()) return absl::DataLossError(map.status().message());
  // Per key, not summed: with --replicas > 1 each key is in several shards
  // (its primary's and its backups'), which is no damage.
  std::vector<bool> held(map->chunks().size(), false);
  const size_t slots = first.keys.empty() ? 0 : first.keys.front().slots.size();
  for (const ShardSnapshot& shard : shards) {
    for (const KeySnapshot& k : shard.keys) {
      const ChunkInfo* info = map->Find(k.key);
      if (info == nullptr || static_cast<int64_t>(k.weights.size()) != info->length) {
        return absl::DataLossError(absl::StrCat("server ", shard.server_id, " holds key ", KeyName(k.key), " of ",
                                                k.weights.size(), " values, which the layout does not have"));
      }
      const bool slots_fit = k.slots.size() == slots && std::all_of(k.slots.begin(), k.slots.end(), [&](const auto& s) {
                               return s.size() == k.weights.size();
                             });
      if (!slots_fit) {
        return absl::DataLossError(absl::StrCat("server ", shard.server_id, "'s key ", KeyName(k.key), " has ",
                                                k.slots.size(), " optimizer slots, not ", slots, " as long as its ",
                                                k.weights.size(), " weights"));
      }
      held[static_cast<size_t>(info - map->chunks().data())] = true;
    }
  }
  const auto missing = std::find(held.begin(), held.end(), false);
  if (missing != held.end()) {
    return absl::DataLossError(absl::StrCat("no shard holds key ", KeyName(map->chunks()[missing - held.begin()].key),
                                            " of the layout (", held.size(), " keys)"));
  }
  return map;
}

std::string WeightsName(const Layout& layout, const ChunkKey& key) {
  return absl::StrCat(layout.tensors[key.tensor].name, "/", key.chunk);
}

std::string SlotName(const Layout& layout, const ChunkKey& key, int slot) {
  return absl::StrCat(WeightsName(layout, key), "/slot", slot);
}

absl::Status WriteShardCheckpoint(const std::string& path, const ShardSnapshot& shard) {
  std::vector<std::string> versions;
  std::vector<TensorView> tensors;
  for (const KeySnapshot& k : shard.keys) {
    versions.push_back(absl::StrCat(k.key.tensor, ".", k.key.chunk, "=", k.version));
    const int64_t n = static_cast<int64_t>(k.weights.size());
    tensors.push_back({WeightsName(shard.layout, k.key), {n}, k.weights});
    for (size_t s = 0; s < k.slots.size(); ++s) {
      tensors.push_back({SlotName(shard.layout, k.key, static_cast<int>(s)), {n}, k.slots[s]});
    }
  }
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"server_id", absl::StrCat(shard.server_id)},
      {"num_servers", absl::StrCat(shard.num_servers)},
      {"mode", ModeName(shard.mode)},
      {"layout", EncodeLayout(shard.layout)},
      {"layout_hash", absl::StrCat(LayoutHash(shard.layout))},
      {"partition_bytes", absl::StrCat(shard.partition_bytes)},
      {"optimizer", shard.optimizer},
      {"pushes_per_step", absl::StrCat(shard.pushes_per_step)},
      {"step", absl::StrCat(shard.step)},
      {"timeline", absl::StrCat(shard.timeline)},
      {"clocks", absl::StrJoin(shard.clocks, ",")},
      {"versions", absl::StrJoin(versions, ";")},
  };
  if (!shard.layout.tables.empty()) {
    metadata["tables"] = EncodeTables(shard.layout.tables);
    AddTableTensors(shard.layout.tables, shard.tables, tensors, metadata);
  }
  return WriteSafetensorsAtomically(path, metadata, tensors);
}

namespace {
absl::StatusOr<ShardSnapshot> DecodeShardCheckpoint(const std::string& path);
}  // namespace

// Every error names the file: the metadata's own (a bad dimension, a
// missing step) did not, and they reach users as a server's start error and
// as shardps_ckpt's.
absl::StatusOr<ShardSnapshot> ReadShardCheckpoint(const std::string& path) {
  absl::StatusOr<ShardSnapshot> shard = DecodeShardCheckpoint(path);
  if (shard.ok() || absl::StrContains(shard.status().message(), path)) return shard;
  return absl::Status(shard.status().code(), absl::StrCat(path, ": ", shard.status().message()));
}

namespace {
absl::StatusOr<ShardSnapshot> DecodeShardCheckpoint(const std::string& path) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  const auto& meta = file->metadata;
  auto format = meta.find("format");
  if (format == meta.end() || format->second != kFormat) {
    return absl::DataLossError(absl::StrCat(path, " is not a ShardPS shard checkpoint"));
  }
  ShardSnapshot shard;
  absl::StatusOr<int64_t> server_id = MetaInt(meta, "server_id");
  absl::StatusOr<int64_t> num_servers = MetaInt(meta, "num_servers");
  absl::StatusOr<int64_t> partition_bytes = MetaInt(meta, "partition_bytes");
  absl::StatusOr<int64_t> step = MetaInt(meta, "step");
  absl::StatusOr<int64_t> timeline = MetaInt(meta, "timeline");
  for (const auto* s : {&server_id, &num_servers, &partition_bytes, &step, &timeline}) {
    if (!s->ok()) return s->status();
  }
  shard.server_id = static_cast<int>(*server_id);
  shard.num_servers = static_cast<int>(*num_servers);
  shard.partition_bytes = *partition_bytes;
  shard.step = *step;
  shard.timeline = *timeline;
  for (absl::string_view c : absl::StrSplit(meta.count("clocks") ? meta.at("clocks") : "", ',', absl::SkipEmpty())) {
    int64_t clock;
    if (!absl::SimpleAtoi(c, &clock)) return absl::DataLossError(absl::StrCat(path, ": bad clock '", c, "'"));
    shard.clocks.push_back(clock);
  }
  absl::StatusOr<Mode> mode = ParseMode(meta.count("mode") ? meta.at("mode") : "");
  if (!mode.ok()) return absl::DataLossError(mode.status().message());
  shard.mode = *mode;
  absl::StatusOr<Layout> layout = DecodeLayout(meta.count("layout") ? meta.at("layout") : "");
  if (!layout.ok()) return layout.status();
  shard.layout = *std::move(layout);
  shard.optimizer = meta.count("optimizer") ? meta.at("optimizer") : "";
  if (meta.count("pushes_per_step")) {
    absl::StatusOr<int64_t> per_step = MetaInt(meta, "pushes_per_step");
    if (!per_step.ok()) return per_step.status();
    shard.pushes_per_step = static_cast<int>(*per_step);
  }

  const std::string versions = meta.count("versions") ? meta.at("versions") : "";
  for (absl::string_view entry : absl::StrSplit(versions, ';', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(entry, absl::ByAnyChar(".="));
    KeySnapshot k;
    if (kv.size() != 3 || !absl::SimpleAtoi(kv[0], &k.key.tensor) ||
        !absl::SimpleAtoi(kv[1], &k.key.chunk) || !absl::SimpleAtoi(kv[2], &k.version) ||
        k.key.tensor >= shard.layout.tensors.size()) {
      return absl::DataLossError(absl::StrCat(path, ": bad version entry '", entry, "'"));
    }
    auto weights = file->tensors.find(WeightsName(shard.layout, k.key));
    if (weights == file->tensors.end()) {
      return absl::DataLossError(absl::StrCat(path, ": no weights for key ", KeyName(k.key)));
    }
    k.weights = std::move(weights->second.values);
    for (int s = 0;; ++s) {
      auto slot = file->tensors.find(SlotName(shard.layout, k.key, s));
      if (slot == file->tensors.end()) break;
      k.slots.push_back(std::move(slot->second.values));
    }
    shard.keys.push_back(std::move(k));
  }
  if (meta.count("tables")) {
    absl::StatusOr<std::vector<TableSpec>> tables = DecodeTables(meta.at("tables"));
    if (!tables.ok()) return absl::DataLossError(absl::StrCat(path, ": ", tables.status().message()));
    shard.layout.tables = *std::move(tables);
    absl::StatusOr<std::vector<TableSnapshot>> rows = ReadTableTensors(shard.layout.tables, *file);
    if (!rows.ok()) return absl::DataLossError(absl::StrCat(path, ": ", rows.status().message()));
    shard.tables = *std::move(rows);
  }
  return shard;
}
}  // namespace

}  // namespace shardps
