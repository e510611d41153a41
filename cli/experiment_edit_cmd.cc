// det experiment archive|unarchive, label add|remove, set description|name|priority|
// gc-policy|max-slots, delete: what a user edits on an experiment besides its run.
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

struct EditOptions {
  int64_t id = 0;
  std::string value;
  int32_t priority = 0;
};

// Sends `request` (its id set here) and prints `done` and the experiment's labels.
absl::Status Patch(CliContext& ctx, int64_t id, v1::PatchExperimentRequest request,
                   const std::string& done) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  request.set_id(id);
  ASSIGN_OR_RETURN(v1::PatchExperimentResponse response, api->PatchExperiment(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  ctx.out << done << '\n';
  return absl::OkStatus();
}

// Adds `name` to `parent`: ID and `value_name` (a required positional) into a fresh
// EditOptions, then `run`.
CLI::App* AddEdit(CLI::App& parent, CliContext& ctx, const std::string& name,
                  const std::string& help, const std::string& value_name,
                  std::function<absl::Status(CliContext&, const EditOptions&)> run) {
  auto options = std::make_shared<EditOptions>();
  CLI::App* cmd = parent.add_subcommand(name, help);
  cmd->add_option("ID", options->id, "experiment ID")->required();
  if (!value_name.empty()) cmd->add_option(value_name, options->value, value_name)->required();
  cmd->callback([&ctx, options, run] {
    ctx.action = [&ctx, options, run] { return run(ctx, *options); };
  });
  return cmd;
}

struct DeleteOptions {
  int64_t id = 0;
  bool yes = false;
};

absl::Status Delete(CliContext& ctx, const DeleteOptions& o) {
  if (!o.yes) {
    RETURN_IF_ERROR(Confirm(ctx,
                            absl::StrCat("Delete experiment ", o.id,
                                         " with its trials, metrics, logs and checkpoint files?"),
                            "--yes"));
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::DeleteExperimentResponse response, api->DeleteExperiment(o.id));
  if (ctx.json) return WriteJson(response, ctx.out);
  if (response.gc_task().empty()) {
    ctx.out << "Deleted experiment " << o.id << '\n';
  } else {
    ctx.out << "Deleting experiment " << o.id << ": the files of " << response.checkpoints()
            << " checkpoint(s) first (task " << response.gc_task()
            << " on an agent; det task list), then its records\n";
  }
  return absl::OkStatus();
}

struct MaxSlotsOptions {
  int64_t id = 0;
  int32_t slots = 0;
  bool clear = false;
};

}  // namespace

absl::Status Confirm(CliContext& ctx, const std::string& question, const std::string& flag) {
  if (!ctx.interactive()) {
    return absl::FailedPreconditionError(
        absl::StrCat(question.substr(0, question.size() - 1),
                     ": not confirmed (stdin is not a terminal); pass ", flag, " to go ahead"));
  }
  ctx.err << question << " [y/N] " << std::flush;
  std::string answer;
  std::getline(*ctx.in, answer);
  if (answer == "y" || answer == "Y" || answer == "yes" || answer == "YES" || answer == "Yes") {
    return absl::OkStatus();
  }
  return absl::CancelledError("not confirmed: nothing was changed");
}

void RegisterExperimentEditCommands(CLI::App& group, CLI::App& set, CliContext& ctx) {
  for (bool archive : {true, false}) {
    AddEdit(group, ctx, archive ? "archive" : "unarchive",
            archive ? "archive an ended experiment: hidden from 'det e list' unless --all"
                    : "unarchive an experiment",
            "", [archive](CliContext& ctx, const EditOptions& o) -> absl::Status {
              ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
              RETURN_IF_ERROR(archive ? api->ArchiveExperiment(o.id)
                                      : api->UnarchiveExperiment(o.id));
              ctx.out << (archive ? "Archived" : "Unarchived") << " experiment " << o.id << '\n';
              return absl::OkStatus();
            });
  }

  CLI::App* label = group.add_subcommand("label", "add or remove an experiment's labels");
  label->require_subcommand(1);
  for (bool add : {true, false}) {
    AddEdit(*label, ctx, add ? "add" : "remove",
            add ? "add a label to an experiment" : "remove a label from an experiment", "LABEL",
            [add](CliContext& ctx, const EditOptions& o) {
              v1::PatchExperimentRequest request;
              (add ? request.add_add_labels() : request.add_remove_labels())->assign(o.value);
              return Patch(ctx, o.id, request,
                           absl::StrCat(add ? "Added label '" : "Removed label '", o.value,
                                        add ? "' to" : "' from", " experiment ", o.id));
            });
  }

  AddEdit(set, ctx, "description", "set an experiment's description", "DESCRIPTION",
          [](CliContext& ctx, const EditOptions& o) {
            v1::PatchExperimentRequest request;
            request.set_description(o.value);
            return Patch(ctx, o.id, request,
                         absl::StrCat("Experiment ", o.id, ": description set"));
          });
  AddEdit(set, ctx, "name", "rename an experiment", "NAME",
          [](CliContext& ctx, const EditOptions& o) {
            v1::PatchExperimentRequest request;
            request.set_name(o.value);
            return Patch(ctx, o.id, request,
                         absl::StrCat("Experiment ", o.id, ": name = ", o.value));
          });
  struct GcPolicy {
    int64_t id = 0;
    std::optional<int32_t> experiment_best, trial_best, trial_latest;
  };
  auto gc = std::make_shared<GcPolicy>();
  CLI::App* gc_cmd = set.add_subcommand(
      "gc-policy", "change which checkpoints are kept; those no longer kept are deleted");
  gc_cmd->add_option("ID", gc->id, "experiment ID")->required();
  gc_cmd->add_option("--save-experiment-best", gc->experiment_best,
                     "keep the N best checkpoints of the experiment");
  gc_cmd->add_option("--save-trial-best", gc->trial_best, "keep the N best of each trial");
  gc_cmd->add_option("--save-trial-latest", gc->trial_latest, "keep the N latest of each trial");
  gc_cmd->callback([&ctx, gc] {
    ctx.action = [&ctx, gc]() -> absl::Status {
      v1::PatchExperimentRequest request;
      if (gc->experiment_best) request.set_save_experiment_best(*gc->experiment_best);
      if (gc->trial_best) request.set_save_trial_best(*gc->trial_best);
      if (gc->trial_latest) request.set_save_trial_latest(*gc->trial_latest);
      if (!gc->experiment_best && !gc->trial_best && !gc->trial_latest) {
        return absl::InvalidArgumentError(
            "gc-policy: give --save-experiment-best, --save-trial-best or --save-trial-latest");
      }
      return Patch(ctx, gc->id, request,
                   absl::StrCat("Experiment ", gc->id, ": checkpoint GC policy set"));
    };
  });

  auto max_slots = std::make_shared<MaxSlotsOptions>();
  CLI::App* max_cmd = set.add_subcommand(
      "max-slots", "limit the slots the experiment's trials hold at once (resources.max_slots)");
  max_cmd->add_option("ID", max_slots->id, "experiment ID")->required();
  CLI::Option* n = max_cmd->add_option("N", max_slots->slots, "at most N slots; 0: unlimited")
                       ->check(CLI::NonNegativeNumber);
  max_cmd->add_flag("--clear", max_slots->clear, "no limit (as N = 0)")->excludes(n);
  max_cmd->add_flag("--json", ctx.json, "print machine-readable JSON");
  max_cmd->callback([&ctx, max_slots, n] {
    ctx.action = [&ctx, max_slots, n]() -> absl::Status {
      if (n->count() == 0 && !max_slots->clear) {
        return absl::InvalidArgumentError("max-slots: give N (0: unlimited) or --clear");
      }
      v1::PatchExperimentRequest request;
      request.set_max_slots(max_slots->clear ? 0 : max_slots->slots);
      return Patch(
          ctx, max_slots->id, request,
          request.max_slots() == 0
              ? absl::StrCat("Experiment ", max_slots->id, ": max_slots cleared (unlimited)")
              : absl::StrCat("Experiment ", max_slots->id, ": max_slots = ", request.max_slots()));
    };
  });

  auto del = std::make_shared<DeleteOptions>();
  CLI::App* delete_cmd = group.add_subcommand(
      "delete", "delete an ended experiment with its trials, metrics, logs and checkpoints");
  delete_cmd->add_option("ID", del->id, "experiment ID")->required();
  delete_cmd->add_flag("--yes,-y", del->yes, "do not ask: delete");
  delete_cmd->add_flag("--json", ctx.json, "print machine-readable JSON");
  delete_cmd->callback([&ctx, del] { ctx.action = [&ctx, del] { return Delete(ctx, *del); }; });

  auto priority = std::make_shared<EditOptions>();
  CLI::App* prio = set.add_subcommand(
      "priority", "set an experiment's scheduling priority (1..99, lower first)");
  prio->add_option("ID", priority->id, "experiment ID")->required();
  prio->add_option("PRIORITY", priority->priority, "priority")->required();
  prio->callback([&ctx, priority] {
    ctx.action = [&ctx, priority]() -> absl::Status {
      ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
      RETURN_IF_ERROR(api->UpdateJobPriority(priority->id, priority->priority));
      ctx.out << "Experiment " << priority->id << ": priority = " << priority->priority << '\n';
      return absl::OkStatus();
    };
  });
}

}  // namespace det::cli
