#include "common/flag_files.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardps {

std::vector<std::string> FlagFileWords(absl::string_view text) {
  std::vector<std::string> words;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!line.empty() && line[0] != '#') words.emplace_back(line);
  }
  return words;
}

std::vector<std::string> FlagFilePaths(absl::string_view value) {
  if (value.empty()) return {};
  return absl::StrSplit(value, ',');
}

absl::StatusOr<std::vector<std::string>> ReadFlagFileWords(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("cannot read the flag file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return FlagFileWords(text.str());
}

}  // namespace shardps
