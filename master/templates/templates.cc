#include "master/templates/templates.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/config/experiment_config.h"
#include "common/status/status_macros.h"

namespace det::master {

absl::Status ValidateStoredName(absl::string_view kind, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && absl::ascii_isalnum(name[0]);
  for (char c : name) ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kind, " name '", name,
                   "': use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter "
                   "or a digit"));
}

absl::Status ValidateTemplateName(const std::string& name) {
  return ValidateStoredName("template", name);
}

absl::StatusOr<v1::Template> Templates::Set(const std::string& name,
                                            const std::string& config_yaml,
                                            const std::string& source,
                                            const std::string& owner, bool* created) {
  RETURN_IF_ERROR(ValidateTemplateName(name));
  RETURN_IF_ERROR(
      config::ValidateTemplate(config_yaml, source.empty() ? absl::StrCat("template ", name) : source));
  return store_.PutTemplate(name, config_yaml, owner, clock_.NowMs(), created);
}

absl::StatusOr<v1::Template> Templates::Get(const std::string& name) {
  return store_.GetTemplate(name);
}

absl::StatusOr<std::vector<v1::Template>> Templates::List() { return store_.ListTemplates(); }

absl::Status Templates::Remove(const std::string& name) { return store_.DeleteTemplate(name); }

config::TemplateLookup Templates::Lookup() {
  return [this](const std::string& name) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(v1::Template t, store_.GetTemplate(name));
    return t.config_yaml();
  };
}

}  // namespace det::master
