#include "common/logging/logging.h"

#include "absl/strings/str_cat.h"
#include "common/logging/log_ring.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace det {

absl::Status InitLogging(absl::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log_level: unknown level '", level,
                     "' (expected trace, debug, info, warn, error or off)"));
  }
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v");
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Logger(const std::string& component) {
  if (auto existing = spdlog::get(component)) return existing;
  try {
    // stderr, and the process's ring of recent lines (det master logs).
    auto logger = std::make_shared<spdlog::logger>(
        component, spdlog::sinks_init_list{std::make_shared<spdlog::sinks::stderr_color_sink_mt>(),
                                           ProcessLogRing()});
    spdlog::initialize_logger(logger);
    return logger;
  } catch (const spdlog::spdlog_ex&) {
    // Another thread registered it between the lookup and here.
    return spdlog::get(component);
  }
}

}  // namespace det
