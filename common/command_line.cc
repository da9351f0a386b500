#include "common/command_line.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/flag_files.h"
#include "common/job_flags.h"

namespace shardps {
namespace {

struct ForeignFlag {
  std::string name;
  std::string file;
};

void CollectForeignFlags(absl::string_view flagfiles, int depth, std::vector<ForeignFlag>& out);

// Flag names that appear in `path` (and the flag files it names) but are not
// defined in this binary. A file that cannot be read is absl's to report.
void CollectForeignFlagsOfFile(const std::string& path, int depth, std::vector<ForeignFlag>& out) {
  const absl::StatusOr<std::vector<std::string>> words = ReadFlagFileWords(path);
  if (!words.ok()) return;
  for (absl::string_view arg : *words) {
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const size_t equals = arg.find('=');
    absl::string_view name = arg.substr(0, equals);
    if (name == "flagfile" && equals != absl::string_view::npos) {
      CollectForeignFlags(arg.substr(equals + 1), depth + 1, out);
      continue;
    }
    if (absl::FindCommandLineFlag(name) != nullptr) continue;
    absl::string_view positive = name;
    if (absl::ConsumePrefix(&positive, "no") && absl::FindCommandLineFlag(positive) != nullptr) {
      continue;
    }
    out.push_back({std::string(name), path});
  }
}

// `flagfiles`: a --flagfile value, files separated by commas as absl takes
// them. Past kMaxFlagfileDepth absl reports the loop itself.
void CollectForeignFlags(absl::string_view flagfiles, int depth, std::vector<ForeignFlag>& out) {
  if (depth > kMaxFlagfileDepth) return;
  for (const std::string& path : FlagFilePaths(flagfiles)) CollectForeignFlagsOfFile(path, depth, out);
}

std::string ProgramName(absl::string_view argv0) {
  const size_t slash = argv0.rfind('/');
  return std::string(slash == absl::string_view::npos ? argv0 : argv0.substr(slash + 1));
}

bool NamesJobFlag(absl::string_view name) {
  return IsJobFlag(name) || (absl::ConsumePrefix(&name, "no") && IsJobFlag(name));
}

// Stops the program (kJobFlagsOnly) on a name no ShardPS program takes, or
// warns (kAnyName) when that name is a near miss of one.
void CheckForeignFlags(const char* program, const std::vector<ForeignFlag>& foreign, ForeignFlags policy) {
  bool refused = false;
  for (const ForeignFlag& f : foreign) {
    if (NamesJobFlag(f.name)) continue;
    const std::string nearest = NearestJobFlag(f.name);
    const std::string hint = nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)");
    if (policy == ForeignFlags::kJobFlagsOnly) {
      fprintf(stderr, "%s: --%s in %s is not a flag of any ShardPS program%s\n", program, f.name.c_str(),
              f.file.c_str(), hint.c_str());
      refused = true;
    } else if (!nearest.empty()) {
      fprintf(stderr, "%s: warning: ignoring --%s in %s: no ShardPS program takes it%s\n", program,
              f.name.c_str(), f.file.c_str(), hint.c_str());
    }
  }
  if (refused) exit(1);
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

std::vector<char*> ParseJobCommandLine(int argc, char** argv, const char* usage, ForeignFlags policy) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsShardpsSource;
  absl::SetFlagsUsageConfig(config);
  std::vector<ForeignFlag> foreign;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--flagfile=") || absl::ConsumePrefix(&arg, "-flagfile=")) {
      CollectForeignFlags(arg, 0, foreign);
    }
  }
  CheckForeignFlags(ProgramName(argv[0]).c_str(), foreign, policy);
  // The storage must outlive parsing; main() calls this once.
  static std::string* undefok = new std::string(
      "--undefok=" + absl::StrJoin(foreign, ",", [](std::string* out, const ForeignFlag& f) { out->append(f.name); }));
  std::vector<char*> args(argv, argv + argc);
  if (!foreign.empty()) args.insert(args.begin() + 1, undefok->data());
  return absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
}

}  // namespace shardps
