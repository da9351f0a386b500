// Command-line parsing for the binaries' main() functions only.
//
// A job is one flag file that every process reads (--flagfile=job.flags). A
// process ignores the flags in that file that are not its own, but an unknown
// flag typed on its command line is still an error.
#ifndef SHARDPS_COMMON_COMMAND_LINE_H_
#define SHARDPS_COMMON_COMMAND_LINE_H_

#include <vector>

namespace shardps {

// Sets the usage text, then parses argv with absl flags (exiting on --help or
// an error, as absl does). Returns the positional arguments.
std::vector<char*> ParseJobCommandLine(int argc, char** argv, const char* usage);

}  // namespace shardps

#endif  // SHARDPS_COMMON_COMMAND_LINE_H_
