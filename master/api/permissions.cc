#include "master/api/permissions.h"

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

bool Allowed(const Caller& caller, const std::string& owner) {
  return !IsCheckedUser(caller) || caller.user.admin() ||
         (!owner.empty() && owner == caller.user.username());
}

// "the experiment's owner (alice)", or "an admin" alone for a thing without an owner.
std::string Rule(absl::string_view thing, const std::string& owner) {
  if (owner.empty()) return absl::StrCat("only an admin (the ", thing, " has no owner)");
  return absl::StrCat("only the ", thing, "'s owner (", owner, ") or an admin");
}

}  // namespace

absl::Status MayChangeExperiment(const Caller& caller, const v1::Experiment& experiment,
                                 absl::string_view action) {
  if (Allowed(caller, experiment.owner())) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(Rule("experiment", experiment.owner()),
                                                  " may ", action, " experiment ",
                                                  experiment.id(), "; you are '",
                                                  caller.user.username(), "'"));
}

absl::Status MustBeAdmin(const Caller& caller, absl::string_view what) {
  if (!IsCheckedUser(caller) || caller.user.admin()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("only an admin may ", what, "; user '",
                                                  caller.user.username(), "' is not one"));
}

absl::Status MayChangeTemplate(const Caller& caller, const v1::Template& tmpl,
                               absl::string_view action) {
  if (Allowed(caller, tmpl.owner())) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(Rule("template", tmpl.owner()), " may ",
                                                  action, " template '", tmpl.name(),
                                                  "'; you are '", caller.user.username(), "'"));
}

absl::Status MayChangeModel(const Caller& caller, const v1::Model& model,
                            absl::string_view action) {
  if (Allowed(caller, model.username())) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(Rule("model", model.username()), " may ",
                                                  action, " model '", model.name(),
                                                  "'; you are '", caller.user.username(), "'"));
}

}  // namespace det::master
