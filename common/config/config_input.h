// What one experiment's effective configuration is made of: the config file, at most one
// stored template, and --config overrides. Plain data; no YAML here.
#ifndef DET_COMMON_CONFIG_CONFIG_INPUT_H_
#define DET_COMMON_CONFIG_CONFIG_INPUT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace det::config {

// Returns the YAML text of the stored template `name`, or NotFound. Called at most once
// per assembled config.
using TemplateLookup = std::function<absl::StatusOr<std::string>(const std::string& name)>;

struct ConfigInput {
  // The experiment config as the user wrote it.
  std::string config_yaml;
  // Where it came from, for messages ("exp.yaml:12: ...").
  std::string config_path = "config";
  // The template to merge under the config (`det experiment create --template NAME`).
  // Empty: the config's own top-level `template: NAME` key, if it has one.
  std::string template_name;
  // "key.path=value" items (`--config`), applied in order after the template merge. The
  // value is read as YAML ("8" is a number, "[a, b]" a list, "{a: 1}" a mapping).
  std::vector<std::string> overrides;
};

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_CONFIG_INPUT_H_
