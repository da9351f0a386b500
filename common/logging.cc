#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status SetUpLogging(const std::string& level, const std::string& tag) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "'; want trace, debug, info, warn, error, critical or off"));
  }
  auto logger = spdlog::stderr_color_mt(tag);
  logger->set_pattern(absl::StrCat("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [", tag, "] %v"));
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

}  // namespace shardps
