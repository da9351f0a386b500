// Logging set-up for the binaries: spdlog to stderr with a process tag.
#ifndef SHARDPS_COMMON_LOGGING_H_
#define SHARDPS_COMMON_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace shardps {

// level: trace, debug, info, warn, error, critical or off. INVALID_ARGUMENT
// for anything else. `tag` names the process in every line ("server 0").
absl::Status SetUpLogging(const std::string& level, const std::string& tag);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LOGGING_H_
