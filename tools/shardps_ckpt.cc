// shardps_ckpt: the checkpoints of a ShardPS job, for operators.
//
//   shardps_ckpt list  --dir=CHECKPOINT_DIR
//   shardps_ckpt merge --dir=CHECKPOINT_DIR [--step=T] --out=model.safetensors
//   shardps_ckpt reshard --dir=CHECKPOINT_DIR [--step=T] --servers=M --out=NEW_DIR
//
// `list` prints the checkpointed steps every server holds. `merge` writes the whole model at step T (default: the newest step
// every server holds) as one safetensors file: the layout's tensor names and
// shapes, float32, the step in the metadata (server/model_export.h).
// `reshard` writes step T's checkpoint for M servers into NEW_DIR, dense keys
// and sparse rows with their optimizer slots (server/reshard.h): start M
// servers with --checkpoint_dir=NEW_DIR and the job goes on from step T.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "server/model_export.h"
#include "server/reshard.h"

ABSL_FLAG(std::string, dir, "", "The job's --checkpoint_dir.");
ABSL_FLAG(int64_t, step, -1, "merge, reshard: the step (-1: the newest every server holds).");
ABSL_FLAG(std::string, out, "", "merge: the safetensors file to write; reshard: the directory to write.");
ABSL_FLAG(int, servers, 0, "reshard: the number of servers to write the checkpoint for.");

namespace shardps {
namespace {

int Fail(const absl::Status& status) {
  fprintf(stderr, "shardps_ckpt: %s\n", std::string(status.message()).c_str());
  return 1;
}

int List(const std::string& dir) {
  absl::StatusOr<std::vector<int64_t>> common = CommonCheckpointSteps(dir);
  if (!common.ok()) return Fail(common.status());
  printf("steps every server holds: [%s]\n", absl::StrJoin(*common, ", ").c_str());
  return 0;
}

int Merge(const std::string& dir, int64_t step, const std::string& out) {
  if (out.empty()) return Fail(absl::InvalidArgumentError("merge needs --out=FILE"));
  absl::StatusOr<MergedModel> model = MergeShards(dir, step >= 0 ? std::optional<int64_t>(step) : std::nullopt);
  if (!model.ok()) return Fail(model.status());
  if (absl::Status written = WriteModel(out, *model); !written.ok()) return Fail(written);
  int64_t values = 0;
  for (const auto& t : model->tensors) values += static_cast<int64_t>(t.size());
  printf("wrote %s: step %lld of a %s job on %d servers, %zu tensors, %lld values\n", out.c_str(),
         static_cast<long long>(model->step), model->mode.c_str(), model->num_servers, model->tensors.size(),
         static_cast<long long>(values));
  return 0;
}

int RunReshard(const std::string& dir, int64_t step, int servers, const std::string& out) {
  if (out.empty()) return Fail(absl::InvalidArgumentError("reshard needs --out=NEW_DIR"));
  absl::StatusOr<int64_t> written =
      ReshardCheckpoint(dir, step >= 0 ? std::optional<int64_t>(step) : std::nullopt, servers, out);
  if (!written.ok()) return Fail(written.status());
  printf("wrote step %lld for %d servers into %s\n", static_cast<long long>(*written), servers, out.c_str());
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "shardps_ckpt list --dir=CHECKPOINT_DIR | merge --dir=CHECKPOINT_DIR [--step=T] --out=model.safetensors | "
      "reshard --dir=CHECKPOINT_DIR [--step=T] --servers=M --out=NEW_DIR");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() == 2 ? args[1] : "";
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty() || (command != "list" && command != "merge" && command != "reshard")) {
    fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  if (command == "list") return shardps::List(dir);
  if (command == "reshard") {
    return shardps::RunReshard(dir, absl::GetFlag(FLAGS_step), absl::GetFlag(FLAGS_servers), absl::GetFlag(FLAGS_out));
  }
  return shardps::Merge(dir, absl::GetFlag(FLAGS_step), absl::GetFlag(FLAGS_out));
}
