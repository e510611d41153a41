// Who may change what through the user API (docs/operations.md, "Who may do what"):
// an experiment's owner or an admin may change it (kill, pause, activate, set slots,
// priority, archive, label, describe, delete); agents and users are the admins'; a
// template's owner or an admin may replace or remove it, and a model's creator or an admin
// may change or delete it or register its versions. When the master checks no users
// (an empty Caller) everything is allowed, as before users existed. Pure functions.
#ifndef DET_MASTER_API_PERMISSIONS_H_
#define DET_MASTER_API_PERMISSIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "master/api/handlers.h"
#include "proto/types.pb.h"

namespace det::master {

// Whether `caller` is a checked user (the master checks users).
inline bool IsCheckedUser(const Caller& caller) { return !caller.user.username().empty(); }

// OK for the owner of `experiment`, an admin or an unchecked caller; else
// PermissionDenied "only the experiment's owner (alice) or an admin may kill experiment 3".
// `action` is the verb phrase before "experiment N" ("kill", "set the slots of").
absl::Status MayChangeExperiment(const Caller& caller, const v1::Experiment& experiment,
                                 absl::string_view action);

// OK for an admin or an unchecked caller; else PermissionDenied "only an admin may
// disable agents; user 'bob' is not one". `what` is the verb phrase ("disable agents").
absl::Status MustBeAdmin(const Caller& caller, absl::string_view what);

// OK for the owner of `tmpl`, an admin or an unchecked caller; else PermissionDenied
// "only the template's owner (alice) or an admin may replace template 'base'".
absl::Status MayChangeTemplate(const Caller& caller, const v1::Template& tmpl,
                               absl::string_view action);

// OK for the creator of `model`, an admin or an unchecked caller; else PermissionDenied
// "only the model's owner (alice) or an admin may delete model 'mnist'".
absl::Status MayChangeModel(const Caller& caller, const v1::Model& model,
                            absl::string_view action);

}  // namespace det::master

#endif  // DET_MASTER_API_PERMISSIONS_H_
