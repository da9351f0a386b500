// The names a job's flag file may hold (DESIGN.md, "Processes and
// configuration": every process reads the one file and ignores the flags that
// are not its own). A name no ShardPS program takes is a typo or a script's
// own flag; these tell the two apart as far as a name can.
#ifndef SHARDPS_COMMON_JOB_FLAGS_H_
#define SHARDPS_COMMON_JOB_FLAGS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardps {

// True when some ShardPS program takes flag `name`: ps_server, ps_worker,
// the client library's options (client/client_config.cc; --push_timeout is
// one only there), emulated_worker, shardps_admin, or the Python library
// (shardps.torch's --row_* table flags). tests/job_flag_files_test.sh checks
// the list against the programs' --helpfull and those two lists.
bool IsJobFlag(absl::string_view name);

// The job flag nearest to `name`, when a typo could explain the difference
// (two edits at most, one for names of four letters or fewer); "" otherwise.
// REQUIRES: !IsJobFlag(name) for a useful answer.
std::string NearestJobFlag(absl::string_view name);

// Edits (insert, delete, substitute one letter) that turn `a` into `b`.
int EditDistance(absl::string_view a, absl::string_view b);

}  // namespace shardps

#endif  // SHARDPS_COMMON_JOB_FLAGS_H_
