#include "common/command_line.h"

#include <fstream>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace shardps {
namespace {

// Flag names that appear in `path` but are not defined in this binary.
void CollectForeignFlags(const std::string& path, std::vector<std::string>& out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view arg = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    absl::string_view name = arg.substr(0, arg.find('='));
    if (absl::FindCommandLineFlag(name) != nullptr) continue;
    absl::string_view positive = name;
    if (absl::ConsumePrefix(&positive, "no") && absl::FindCommandLineFlag(positive) != nullptr) {
      continue;
    }
    out.emplace_back(name);
  }
}

// --help lists the flags defined in ShardPS's own sources (a binary's flags
// may live beside its main, e.g. client/client_flags.cc), not Abseil's.
bool IsShardpsSource(absl::string_view file) {
  for (absl::string_view dir : {"server/", "worker/", "bench/", "tools/", "common/"}) {
    if (absl::StartsWith(file, dir)) return true;
  }
  return false;
}

}  // namespace

std::vector<char*> ParseJobCommandLine(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsShardpsSource;
  absl::SetFlagsUsageConfig(config);
  std::vector<std::string> foreign;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--flagfile=") || absl::ConsumePrefix(&arg, "-flagfile=")) {
      CollectForeignFlags(std::string(arg), foreign);
    }
  }
  // The storage must outlive parsing; main() calls this once.
  static std::string* undefok = new std::string("--undefok=" + absl::StrJoin(foreign, ","));
  std::vector<char*> args(argv, argv + argc);
  if (!foreign.empty()) args.insert(args.begin() + 1, undefok->data());
  return absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
}

}  // namespace shardps
