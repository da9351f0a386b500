// Command-line parsing for the binaries' main() functions only.
//
// A job is one flag file that every process reads (--flagfile=job.flags). A
// process ignores the flags in that file that are not its own, but an unknown
// flag typed on its command line is still an error, and so is a name in the
// file that no ShardPS program takes, where no script's flags can be there.
#ifndef SHARDPS_COMMON_COMMAND_LINE_H_
#define SHARDPS_COMMON_COMMAND_LINE_H_

#include <vector>

namespace shardps {

// What a flag file may hold besides this program's own flags.
enum class ForeignFlags {
  // Other ShardPS programs' flags only (common/job_flags.h): a C++ worker,
  // whose job runs no script. Any other name stops the program (exit 1),
  // naming the file and the nearest job flag.
  kJobFlagsOnly,
  // Any name (a server or a tool may share the file with a Python script's
  // own flags); a near miss of a job flag is warned about on stderr.
  kAnyName,
};

// Sets the usage text, then parses argv with absl flags (exiting on --help or
// an error, as absl does). Returns the positional arguments.
std::vector<char*> ParseJobCommandLine(int argc, char** argv, const char* usage, ForeignFlags foreign);

}  // namespace shardps

#endif  // SHARDPS_COMMON_COMMAND_LINE_H_
