// det experiment|e create|list|describe|config|kill
#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/experiment_files.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";
// Experiments per ListExperiments page.
constexpr int kListPage = 200;
// Long poll of one trial's logs while following an experiment.
constexpr int kFollowWaitMs = 2000;
// Pause between polls while an experiment has no unfinished trial to wait on.
constexpr absl::Duration kFollowIdle = absl::Seconds(1);

struct CreateOptions {
  std::string config;
  std::string context_dir;
  bool follow = false;
  bool force = false;
  std::string template_name;
  std::vector<std::string> config_overrides;
};

// Writes "[trial ID] <log line>" to ctx.out.
std::function<void(const v1::LogLine&)> PrintTrialLine(CliContext& ctx, int64_t trial_id) {
  return [&ctx, trial_id](const v1::LogLine& line) {
    ctx.out << "[trial " << trial_id << "] " << FormatLogLine(line) << '\n';
  };
}

// Prints the experiment's trials' log lines as they appear until the experiment ends,
// then a summary. Error when it ended in ERROR or CANCELED.
absl::Status FollowExperiment(CliContext& ctx, ApiClient& api, int64_t id) {
  std::map<int64_t, TrialLogCursor> cursors;
  v1::GetExperimentResponse latest;
  while (true) {
    ASSIGN_OR_RETURN(latest, api.GetExperiment(id));
    const bool ended = IsTerminal(latest.experiment().state());
    int printed = 0;
    TrialLogCursor* unfinished = nullptr;
    for (const v1::Trial& trial : latest.trials()) {
      TrialLogCursor& cursor = cursors[trial.id()];
      cursor.trial_id = trial.id();
      while (!cursor.done) {
        ASSIGN_OR_RETURN(int n, FetchTrialLogs(api, cursor, /*wait_ms=*/0,
                                               PrintTrialLine(ctx, trial.id())));
        printed += n;
        if (n == 0) break;
      }
      if (!cursor.done && unfinished == nullptr) unfinished = &cursor;
    }
    ctx.out.flush();
    if (ended) break;
    if (printed > 0) continue;
    if (unfinished != nullptr) {
      RETURN_IF_ERROR(FetchTrialLogs(api, *unfinished, kFollowWaitMs,
                                     PrintTrialLine(ctx, unfinished->trial_id))
                          .status());
    } else {
      ctx.sleep(kFollowIdle);
    }
  }

  const v1::Experiment& experiment = latest.experiment();
  ctx.out << "\nExperiment " << id << " ended: " << StateName(experiment.state()) << '\n';
  if (latest.trials_size() > 0) TrialsTable(latest.trials()).Render(ctx.out);
  if (experiment.state() == v1::STATE_COMPLETED) return absl::OkStatus();
  std::string reason = absl::StrCat("experiment ", id, " ended in ",
                                    StateName(experiment.state()));
  if (!experiment.error().empty()) absl::StrAppend(&reason, ": ", experiment.error());
  return absl::AbortedError(reason);
}

absl::Status Create(CliContext& ctx, const CreateOptions& options) {
  ASSIGN_OR_RETURN(std::string config_yaml, ReadConfigFile(options.config));
  v1::CreateExperimentRequest request;
  request.set_config_yaml(std::move(config_yaml));
  request.set_config_path(options.config);
  request.set_force(options.force);
  request.set_template_(options.template_name);
  for (const std::string& item : options.config_overrides) request.add_config_overrides(item);
  if (!options.context_dir.empty()) {
    ASSIGN_OR_RETURN(std::vector<v1::ContextFile> files,
                     ReadContextDir(options.context_dir));
    for (v1::ContextFile& file : files) *request.add_context() = std::move(file);
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::CreateExperimentResponse response, api->CreateExperiment(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  const int64_t id = response.experiment().id();
  ctx.out << "Created experiment " << id << '\n';
  for (const std::string& warning : response.warnings()) {
    ctx.out << "Warning: " << warning << '\n';
  }
  if (!options.follow) return absl::OkStatus();
  return FollowExperiment(ctx, *api, id);
}

// `user`: only that user's experiments, when not empty.
absl::Status List(CliContext& ctx, const std::string& user) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ListExperimentsResponse all;
  for (int offset = 0;;) {
    v1::ListExperimentsRequest request;
    request.set_user(user);
    request.set_limit(kListPage);
    request.set_offset(offset);
    ASSIGN_OR_RETURN(v1::ListExperimentsResponse page, api->ListExperiments(request));
    all.set_total(page.total());
    for (v1::Experiment& e : *page.mutable_experiments()) {
      *all.add_experiments() = std::move(e);
    }
    offset += page.experiments_size();
    // A page other than full means the last one (or a master ignoring `limit`).
    if (page.experiments_size() != kListPage ||
        (page.total() > 0 && all.experiments_size() >= page.total())) {
      break;
    }
  }
  if (ctx.json) return WriteJson(all, ctx.out);
  ExperimentsTable(all.experiments()).Render(ctx.out);
  return absl::OkStatus();
}

absl::Status Describe(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetExperimentResponse response, api->GetExperiment(id));
  if (ctx.json) return WriteJson(response, ctx.out);
  RenderKeyValues(ExperimentFields(response.experiment()), ctx.out);
  ctx.out << "\nTrials:\n";
  TrialsTable(response.trials()).Render(ctx.out);
  return absl::OkStatus();
}

absl::Status Config(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetExperimentResponse response, api->GetExperiment(id));
  const std::string& yaml = response.experiment().config_yaml();
  ctx.out << yaml;
  if (!yaml.empty() && yaml.back() != '\n') ctx.out << '\n';
  return absl::OkStatus();
}

absl::Status Kill(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->KillExperiment(id));
  ctx.out << "Killed experiment " << id << '\n';
  return absl::OkStatus();
}

absl::Status Pause(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->PauseExperiment(id));
  ctx.out << "Paused experiment " << id << " (running trials checkpoint and stop)\n";
  return absl::OkStatus();
}

absl::Status Activate(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->ActivateExperiment(id));
  ctx.out << "Activated experiment " << id << '\n';
  return absl::OkStatus();
}

absl::Status ListCheckpoints(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ListCheckpointsRequest request;
  request.set_experiment_id(id);
  ASSIGN_OR_RETURN(v1::ListCheckpointsResponse response, api->ListCheckpoints(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  if (response.checkpoints_size() == 0) {
    ctx.out << "Experiment " << id << " has no checkpoints.\n";
    return absl::OkStatus();
  }
  CheckpointsTable(response.checkpoints()).Render(ctx.out);
  return absl::OkStatus();
}

// Adds subcommand `name` taking a required experiment ID; `run` becomes the action.
CLI::App* AddIdCommand(CLI::App& group, CliContext& ctx, const std::string& name,
                       const std::string& help,
                       absl::Status (*run)(CliContext&, int64_t)) {
  auto id = std::make_shared<int64_t>(0);
  CLI::App* cmd = group.add_subcommand(name, help);
  cmd->add_option("ID", *id, "experiment ID")->required();
  cmd->callback([&ctx, id, run] { ctx.action = [&ctx, id, run] { return run(ctx, *id); }; });
  return cmd;
}

}  // namespace

void RegisterExperimentCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("experiment", "manage experiments")->alias("e");
  group->require_subcommand(1);

  auto create_options = std::make_shared<CreateOptions>();
  CLI::App* create = group->add_subcommand("create", "create an experiment");
  create->add_option("CONFIG", create_options->config, "experiment config file (YAML)")
      ->required();
  create->add_option("CONTEXT_DIR", create_options->context_dir,
                     "model context directory to upload");
  CLI::Option* follow = create->add_flag("-f,--follow", create_options->follow,
                                         "follow the trials' logs until the experiment ends");
  create->add_flag("--json", ctx.json, kJsonHelp)->excludes(follow);
  create->add_flag("--force", create_options->force,
                   "queue it even if it can never fit the resource pool as configured");
  create->add_option("-t,--template", create_options->template_name,
                     "stored template to merge the config over (det template list)");
  create->add_option("--config", create_options->config_overrides,
                     "override a config value after the template: KEY.PATH=VALUE (VALUE is "
                     "YAML; repeatable)")
      ->take_all()
      ->expected(1);
  create->callback([&ctx, create_options] {
    ctx.action = [&ctx, create_options] { return Create(ctx, *create_options); };
  });

  auto list_user = std::make_shared<std::string>();
  CLI::App* list = group->add_subcommand("list", "list experiments");
  list->add_flag("--json", ctx.json, kJsonHelp);
  list->add_option("--user", *list_user, "only the experiments of this user (username)");
  list->callback([&ctx, list_user] {
    ctx.action = [&ctx, list_user] { return List(ctx, *list_user); };
  });

  AddIdCommand(*group, ctx, "describe", "describe an experiment and its trials", Describe)
      ->add_flag("--json", ctx.json, kJsonHelp);
  AddIdCommand(*group, ctx, "config", "print an experiment's effective config", Config);
  AddIdCommand(*group, ctx, "kill", "kill an experiment", Kill);
  AddIdCommand(*group, ctx, "pause", "pause an experiment: its trials checkpoint and stop", Pause);
  AddIdCommand(*group, ctx, "activate", "resume a paused experiment", Activate);
  // det experiment set slots ID N [--force]
  CLI::App* set = group->add_subcommand("set", "change a paused experiment");
  set->require_subcommand(1);
  struct SetSlots {
    int64_t id = 0;
    int32_t slots = 0;
    bool force = false;
  };
  auto set_slots = std::make_shared<SetSlots>();
  CLI::App* slots = set->add_subcommand(
      "slots", "set slots_per_trial; trials resume from their checkpoints on that many slots "
               "with the same global batch size");
  slots->add_option("ID", set_slots->id, "experiment ID")->required();
  slots->add_option("SLOTS", set_slots->slots, "slots per trial")->required();
  slots->add_flag("--force", set_slots->force, "even if it can never fit the resource pool");
  slots->callback([&ctx, set_slots] {
    ctx.action = [&ctx, set_slots]() -> absl::Status {
      ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
      ASSIGN_OR_RETURN(v1::SetExperimentSlotsResponse r,
                       api->SetExperimentSlots(set_slots->id, set_slots->slots, set_slots->force));
      ctx.out << "Experiment " << set_slots->id << ": slots_per_trial = "
              << r.experiment().slots_per_trial() << " (activate it to resume)\n";
      return absl::OkStatus();
    };
  });
  AddIdCommand(*group, ctx, "list-checkpoints",
               "list an experiment's checkpoints (deleted ones included, as DELETED)", ListCheckpoints)
      ->add_flag("--json", ctx.json, kJsonHelp);
}

}  // namespace det::cli
