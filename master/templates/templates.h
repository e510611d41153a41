// Config templates (det template ...): named partial experiment configs stored in the
// master's database, merged under an experiment's config when it names one. Validation on
// the way in; storage through the Store. Not thread-safe: the master calls it on its loop.
#ifndef DET_MASTER_TEMPLATES_TEMPLATES_H_
#define DET_MASTER_TEMPLATES_TEMPLATES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock/clock.h"
#include "common/config/config_input.h"
#include "master/store/store.h"
#include "proto/types.pb.h"

namespace det::master {

// InvalidArgument "KIND name 'NAME': use 1 to 128 letters, ..." unless `name` is 1 to 128
// letters, digits, '.', '_' or '-', starting with a letter or a digit: the names the master
// stores things under and REST paths carry (templates, models).
absl::Status ValidateStoredName(absl::string_view kind, const std::string& name);
// ValidateStoredName("template", name).
absl::Status ValidateTemplateName(const std::string& name);

class Templates {
 public:
  // `store` and `clock` must outlive this object.
  Templates(Store& store, Clock& clock) : store_(store), clock_(clock) {}

  // Creates or replaces template `name` after checking the name and the YAML (a mapping
  // of experiment config keys that names no template; see config::ValidateTemplate).
  // `source` names the text in messages (the user's file name); "" for "template NAME".
  // Experiments created before keep their merged configs. `owner` owns a new template; a
  // replaced one keeps its owner (who may replace it is the caller's check).
  absl::StatusOr<v1::Template> Set(const std::string& name, const std::string& config_yaml,
                                   const std::string& source, const std::string& owner,
                                   bool* created);
  // NotFound "template 'NAME' does not exist".
  absl::StatusOr<v1::Template> Get(const std::string& name);
  // By name.
  absl::StatusOr<std::vector<v1::Template>> List();
  // NotFound as Get.
  absl::Status Remove(const std::string& name);

  // Looks templates up for config::ParseExperimentConfig. Valid while this object is.
  config::TemplateLookup Lookup();

 private:
  Store& store_;
  Clock& clock_;
};

}  // namespace det::master

#endif  // DET_MASTER_TEMPLATES_TEMPLATES_H_
