// The one place spdlog is configured. Daemons log to stderr; nothing but the CLI writes to
// stdout.
#ifndef DET_COMMON_LOGGING_LOGGING_H_
#define DET_COMMON_LOGGING_LOGGING_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace det {

// Sets the level ("trace", "debug", "info", "warn", "error") of every logger. Call once
// from main before other threads start.
absl::Status InitLogging(absl::string_view level);

// A named logger for one component ("master", "scheduler", "agent", ...). Thread-safe.
std::shared_ptr<spdlog::logger> Logger(const std::string& component);

}  // namespace det

#endif  // DET_COMMON_LOGGING_LOGGING_H_
