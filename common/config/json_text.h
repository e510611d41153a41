// JSON text pieces written by hand (the YAML -> JSON conversion, hyperparameter JSON).
#ifndef DET_COMMON_CONFIG_JSON_TEXT_H_
#define DET_COMMON_CONFIG_JSON_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace det::config {

// `s` as a JSON string literal: quoted, with quotes, backslashes and control characters
// escaped (other bytes are copied as they are).
std::string JsonString(absl::string_view s);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_JSON_TEXT_H_
