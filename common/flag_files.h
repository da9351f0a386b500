// Flag files (--flagfile) as absl reads them, for the readers that must see
// what a process's flags will be without being absl's parser: the client
// library's options (client/client_config.cc) and the check of a job's flag
// file for names no ShardPS program takes (common/command_line.cc).
#ifndef SHARDPS_COMMON_FLAG_FILES_H_
#define SHARDPS_COMMON_FLAG_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

// How deep flag files may name flag files; past it, a loop.
inline constexpr int kMaxFlagfileDepth = 4;

// A flag file's words: one per line, leading whitespace dropped and the rest
// kept (spaces inside and at the end too); blank lines and lines that start
// with '#' are none.
std::vector<std::string> FlagFileWords(absl::string_view text);

// The files a --flagfile value names: separated by commas; none for an empty
// value, and an empty name for two commas in a row or one at an end (which
// absl fails to open).
std::vector<std::string> FlagFilePaths(absl::string_view value);

// The words of flag file `path`; FAILED_PRECONDITION naming it when it
// cannot be read.
absl::StatusOr<std::vector<std::string>> ReadFlagFileWords(const std::string& path);

}  // namespace shardps

#endif  // SHARDPS_COMMON_FLAG_FILES_H_
