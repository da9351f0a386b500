#include "server/model_export.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/key_partition.h"
#include "common/table_spec.h"
#include "server/safetensors.h"
#include "server/shard_checkpoint.h"

namespace shardps {
namespace {

// The servers' count of the shard files in `dir`, and each server's steps.
struct ShardFiles {
  int num_servers = 0;
  std::map<int, std::vector<int64_t>> steps;  // server id -> ascending steps
};

absl::StatusOr<ShardFiles> FindShards(const std::string& dir) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) return absl::NotFoundError(absl::StrCat("cannot read ", dir, ": ", error.message()));
  ShardFiles found;
  for (const auto& entry : it) {
    const std::optional<ShardCheckpointName> name = ParseShardCheckpointName(entry.path().filename().string());
    if (!name.has_value()) continue;
    const int id = name->server_id, n = name->num_servers;
    if (found.num_servers != 0 && found.num_servers != n) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " holds shards of jobs with ", found.num_servers, " and ", n, " servers"));
    }
    found.num_servers = n;
    found.steps[id] = ListCheckpointSteps(dir, id, n);
  }
  if (found.num_servers == 0) return absl::NotFoundError(absl::StrCat("no shard checkpoints in ", dir));
  return found;
}

// Checks `shard` against the first one read; FAILED_PRECONDITION naming what differs.
absl::Status Agrees(const ShardSnapshot& first, const ShardSnapshot& shard, const std::string& what) {
  if (shard.layout != first.layout) return absl::FailedPreconditionError(absl::StrCat(what, " has another layout"));
  if (shard.mode != first.mode) return absl::FailedPreconditionError(absl::StrCat(what, " has mode ", ModeName(shard.mode)));
  if (shard.partition_bytes != first.partition_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(what, " has chunks of ", shard.partition_bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Copies server `id`'s keys into their tensors; FAILED_PRECONDITION for a
// key that is another server's or held twice. `map` is the shards'
// CoveredKeyMap: every key they hold is in it, with its length.
absl::Status PlaceKeys(const ShardSnapshot& shard, int id, const std::string& path, const KeyMap& map,
                       MergedModel& model, std::vector<bool>& placed) {
  if (placed.empty()) placed.assign(map.chunks().size(), false);
  for (const KeySnapshot& k : shard.keys) {
    const ChunkInfo* info = map.Find(k.key);
    if (info->server != id) {
      return absl::FailedPreconditionError(absl::StrCat(path, " holds key ", KeyName(k.key), ", not server ", id, "'s"));
    }
    const size_t index = static_cast<size_t>(info - map.chunks().data());
    if (placed[index]) return absl::FailedPreconditionError(absl::StrCat("key ", KeyName(k.key), " is held twice"));
    placed[index] = true;
    std::copy(k.weights.begin(), k.weights.end(), model.tensors[k.key.tensor].begin() + info->offset);
  }
  return absl::OkStatus();
}

// Appends server `id`'s rows of every table; FAILED_PRECONDITION for a row
// that hashes to another server.
absl::Status AddTableRows(const ShardSnapshot& shard, int id, int num_servers, const std::string& path,
                          std::vector<std::vector<std::pair<int64_t, const float*>>>& rows) {
  if (rows.empty()) rows.resize(shard.layout.tables.size());
  for (size_t t = 0; t < shard.tables.size() && t < rows.size(); ++t) {
    const TableSnapshot& s = shard.tables[t];
    const size_t dim = static_cast<size_t>(shard.layout.tables[t].dim);
    for (size_t r = 0; r < s.ids.size(); ++r) {
      if (RowServer(s.ids[r], num_servers) != id) {
        return absl::FailedPreconditionError(absl::StrCat(path, " holds row ", s.ids[r], " of table '",
                                                          shard.layout.tables[t].name, "', not server ", id, "'s"));
      }
      rows[t].push_back({s.ids[r], s.rows.data() + r * dim});
    }
  }
  return absl::OkStatus();
}

MergedTable SortedTable(std::vector<std::pair<int64_t, const float*>>& rows, int dim) {
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  MergedTable table;
  table.ids.reserve(rows.size());
  table.rows.reserve(rows.size() * static_cast<size_t>(dim));
  for (const auto& [id, row] : rows) {
    table.ids.push_back(id);
    table.rows.insert(table.rows.end(), row, row + dim);
  }
  return table;
}

// The steps every server in `shards` holds, ascending.
std::vector<int64_t> CommonSteps(ShardFiles& shards) {
  std::vector<int64_t> common;
  for (int id = 0; id < shards.num_servers; ++id) {
    const std::vector<int64_t>& steps = shards.steps[id];
    if (id == 0) {
      common = steps;
      continue;
    }
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), steps.begin(), steps.end(), std::back_inserter(both));
    common = both;
  }
  return common;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> CommonCheckpointSteps(const std::string& dir) {
  absl::StatusOr<ShardFiles> shards = FindShards(dir);
  if (!shards.ok()) return shards.status();
  return CommonSteps(*shards);
}

absl::StatusOr<std::vector<ShardSnapshot>> ReadShards(const std::string& dir, std::optional<int64_t> step) {
  absl::StatusOr<ShardFiles> shards = FindShards(dir);
  if (!shards.ok()) return shards.status();
  const std::vector<int64_t> common = CommonSteps(*shards);
  if (!step) {
    if (common.empty()) return absl::NotFoundError(absl::StrCat("no step has a checkpoint on every server in ", dir));
    step = common.back();
  }
  if (std::find(common.begin(), common.end(), *step) == common.end()) {
    return absl::NotFoundError(absl::StrCat("not every server has a checkpoint of step ", *step, " in ", dir,
                                            "; every one has [", absl::StrJoin(common, ", "), "]"));
  }
  std::vector<ShardSnapshot> read;
  read.reserve(shards->num_servers);
  for (int id = 0; id < shards->num_servers; ++id) {
    const std::string path = ShardCheckpointPath(dir, id, shards->num_servers, *step);
    absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(path);
    if (!shard.ok()) return shard.status();
    if (id > 0) {
      if (absl::Status agree = Agrees(read.front(), *shard, path); !agree.ok()) return agree;
    }
    read.push_back(*std::move(shard));
  }
  return read;
}

absl::StatusOr<MergedModel> MergeShards(const std::string& dir, std::optional<int64_t> step) {
  absl::StatusOr<std::vector<ShardSnapshot>> read = ReadShards(dir, step);
  if (!read.ok()) return read.status();
  absl::StatusOr<KeyMap> map = CoveredKeyMap(*read);
  if (!map.ok()) {
    return absl::DataLossError(absl::StrCat(dir, ", step ", read->front().step, ": ", map.status().message()));
  }
  MergedModel model;
  model.step = read->front().step;
  model.num_servers = static_cast<int>(read->size());
  model.layout = read->front().layout;
  model.mode = ModeName(read->front().mode);
  for (const TensorSpec& t : model.layout.tensors) model.tensors.emplace_back(t.NumElements());
  std::vector<bool> placed;  // per chunk of the layout
  std::vector<std::vector<std::pair<int64_t, const float*>>> rows;  // per table, pointing into *read
  for (int id = 0; id < model.num_servers; ++id) {
    const std::string path = ShardCheckpointPath(dir, id, model.num_servers, model.step);
    if (absl::Status s = PlaceKeys((*read)[id], id, path, *map, model, placed); !s.ok()) return s;
    if (absl::Status s = AddTableRows((*read)[id], id, model.num_servers, path, rows); !s.ok()) return s;
  }
  for (size_t t = 0; t < rows.size(); ++t) model.tables.push_back(SortedTable(rows[t], model.layout.tables[t].dim));
  return model;
}

absl::Status WriteModel(const std::string& path, const MergedModel& model) {
  std::vector<TensorView> tensors;
  for (size_t t = 0; t < model.layout.tensors.size(); ++t) {
    tensors.push_back({model.layout.tensors[t].name, model.layout.tensors[t].dims, model.tensors[t]});
  }
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const TableSpec& spec = model.layout.tables[t];
    const int64_t n = static_cast<int64_t>(model.tables[t].ids.size());
    tensors.push_back({spec.name + ".ids", {n}, {}, model.tables[t].ids, /*is_int=*/true});
    tensors.push_back({spec.name + ".rows", {n, spec.dim}, model.tables[t].rows});
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "shardps-model-v1"},
      {"step", absl::StrCat(model.step)},
      {"mode", model.mode},
      {"num_servers", absl::StrCat(model.num_servers)},
      {"layout_hash", absl::StrCat(LayoutHash(model.layout))},
  };
  return WriteSafetensorsAtomically(path, metadata, tensors);
}

}  // namespace shardps
