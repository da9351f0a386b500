#include "server/view_metadata.h"

#include "common/rpc_metadata.h"

namespace shardps {

MetadataPairs ViewMetadata(const ParameterServer& core) {
  MetadataPairs pairs;
  if (const ServerView view = core.View(); !view.Pristine()) pairs.emplace_back(kServerViewKey, view.Text());
  if (std::string moved = core.MovedText(); !moved.empty()) pairs.emplace_back(kServerMovedKey, std::move(moved));
  if (const std::optional<CheckpointStep> announced = core.AnnouncedCheckpointStep()) {
    pairs.emplace_back(kCheckpointStepKey, CheckpointStepText(*announced));
  }
  return pairs;
}

void NoteViewMetadata(const ReceivedMetadata& metadata, ParameterServer& core, ServerView* view) {
  if (auto it = metadata.find(kCheckpointStepKey); it != metadata.end()) {
    if (auto announced = ParseCheckpointStep(absl::string_view(it->second.data(), it->second.size()))) {
      core.NoteCheckpointStep(*announced);
    }
  }
  if (auto it = metadata.find(kServerMovedKey); it != metadata.end()) {
    core.NoteMoved(absl::string_view(it->second.data(), it->second.size()));
  }
  if (auto it = metadata.find(kServerViewKey); it != metadata.end()) {
    if (auto theirs = ServerView::Parse(absl::string_view(it->second.data(), it->second.size()))) {
      if (view != nullptr) {
        view->Merge(*theirs);
      } else {
        core.NoteView(*theirs);
      }
    }
  }
}

}  // namespace shardps
