#include "server/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {
namespace {

// OK when a file can be created, written and removed in `dir`.
absl::Status ProbeWritable(const std::string& dir, int server_id) {
  const std::string probe = absl::StrCat(dir, "/.shardps-write-probe-", server_id);
  const int fd = open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0 || write(fd, "x", 1) != 1) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory ", dir, " is not writable: ", reason));
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& dir, int server_id,
                                                                       int num_servers, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("checkpoints to keep is ", keep, "; want >= 1"));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create checkpoint directory ", dir, ": ", error.message()));
  }
  if (absl::Status writable = ProbeWritable(dir, server_id); !writable.ok()) return writable;
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(dir, server_id, num_servers, keep));
}

std::vector<int64_t> CheckpointStore::Steps() const {
  absl::MutexLock lock(&mu_);
  return ListCheckpointSteps(dir_, server_id_, num_servers_);
}

absl::StatusOr<std::string> CheckpointStore::Write(const ShardSnapshot& shard) {
  absl::MutexLock lock(&mu_);
  const std::string path = PathOf(shard.step);
  if (absl::Status written = WriteShardCheckpoint(path, shard); !written.ok()) return written;
  std::vector<int64_t> steps = ListCheckpointSteps(dir_, server_id_, num_servers_);
  for (size_t i = 0; i + keep_ < steps.size(); ++i) {
    std::error_code ignored;
    std::filesystem::remove(PathOf(steps[i]), ignored);
  }
  return path;
}

absl::StatusOr<ShardSnapshot> CheckpointStore::Read(int64_t step) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<ShardSnapshot> shard = ReadShardCheckpoint(PathOf(step));
  if (absl::IsNotFound(shard.status())) {
    return absl::NotFoundError(absl::StrCat("server ", server_id_, " has no checkpoint of step ", step, " in ", dir_,
                                            " (it has steps [",
                                            absl::StrJoin(ListCheckpointSteps(dir_, server_id_, num_servers_), ", "),
                                            "])"));
  }
  return shard;
}

std::string CheckpointStore::SetAside(int64_t step) {
  absl::MutexLock lock(&mu_);
  const std::string to = PathOf(step) + ".damaged";
  std::error_code ignored;
  std::filesystem::rename(PathOf(step), to, ignored);
  return to;
}

void CheckpointStore::DiscardAfter(int64_t step) {
  absl::MutexLock lock(&mu_);
  for (int64_t s : ListCheckpointSteps(dir_, server_id_, num_servers_)) {
    std::error_code ignored;
    if (s > step) std::filesystem::remove(PathOf(s), ignored);
  }
}

}  // namespace shardps
