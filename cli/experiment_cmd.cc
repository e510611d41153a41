// det experiment|e create|fork|download-model-def|list|describe|config|kill|pause|activate|
// set|list-trials|list-checkpoints|logs|wait
#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/experiment_files.h"
#include "cli/format.h"
#include "cli/model_def.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";
// Experiments per ListExperiments page.
constexpr int kListPage = 200;
// Long poll of one trial's logs while following an experiment.
constexpr int kFollowWaitMs = 2000;
// Pause between polls while an experiment has no unfinished trial to wait on.
constexpr absl::Duration kFollowIdle = absl::Seconds(1);
constexpr char kDiagnosticsHelp[] =
    "also show diagnostic metrics (named diag/...: parameter hashes, checksums)";

struct CreateOptions {
  std::string config;
  std::string context_dir;
  bool follow = false;
  bool force = false;
  bool paused = false;
  std::string template_name;
  std::vector<std::string> config_overrides;
  // --test-mode: a short single-trial run of the config and model definition.
  bool test_mode = false;
  bool local = false;
};

// Batches a --test-mode trial trains.
constexpr int64_t kTestModeBatches = 10;

// "Warning: ..." lines for the master's warnings.
void PrintWarnings(CliContext& ctx, const google::protobuf::RepeatedPtrField<std::string>& warnings) {
  for (const std::string& warning : warnings) ctx.out << "Warning: " << warning << '\n';
}

// Writes "[trial ID] <log line>" to ctx.out.
std::function<void(const v1::LogLine&)> PrintTrialLine(CliContext& ctx, int64_t trial_id) {
  return [&ctx, trial_id](const v1::LogLine& line) {
    ctx.out << "[trial " << trial_id << "] " << FormatLogLine(line) << '\n';
  };
}

// Prints the experiment's trials' log lines as they appear until the experiment ends
// (`follow`; else the lines there are now), then, when following, a summary. Error when
// it ended in ERROR or CANCELED.
absl::Status FollowExperiment(CliContext& ctx, ApiClient& api, int64_t id, bool follow = true) {
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
    if (!follow) return absl::OkStatus();
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
  if (latest.trials_size() > 0) {
    TrialsTable(latest.trials(), ParseSearcherMetric(experiment.config_yaml())).Render(ctx.out, ctx.width);
  }
  if (experiment.state() == v1::STATE_COMPLETED) return absl::OkStatus();
  std::string reason = absl::StrCat("experiment ", id, " ended in ",
                                    StateName(experiment.state()));
  if (!experiment.error().empty()) absl::StrAppend(&reason, ": ", experiment.error());
  return absl::AbortedError(reason);
}

// Creates the experiment `request` describes and says so ("Created experiment N`what`"),
// following it with options.follow. `created`, when given, receives its id once created.
absl::Status Submit(CliContext& ctx, const v1::CreateExperimentRequest& request,
                    const CreateOptions& options, const std::string& what,
                    int64_t* created = nullptr) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::CreateExperimentResponse response, api->CreateExperimentStream(request));
  const int64_t id = response.experiment().id();
  if (created != nullptr) *created = id;
  if (ctx.json) return WriteJson(response, ctx.out);
  ctx.out << "Created experiment " << id << what << '\n';
  if (options.paused) ctx.out << "It is paused: det e activate " << id << " starts it\n";
  PrintWarnings(ctx, response.warnings());
  if (!options.follow) return absl::OkStatus();
  return FollowExperiment(ctx, *api, id);
}

absl::Status Create(CliContext& ctx, const CreateOptions& given) {
  if (given.local) {
    return absl::UnimplementedError(
        "--local: det runs trials on agents only. To try the code on this machine, run the "
        "entrypoint in the context directory (det.core.init() works off-cluster), or use "
        "--test-mode for a short run on the cluster");
  }
  CreateOptions options = given;
  ASSIGN_OR_RETURN(std::string config_yaml, ReadConfigFile(options.config));
  if (options.test_mode) {
    // As Determined's test mode: one trial (hyperparameters sampled as a single search
    // samples them), a few batches, no restarts, followed to its end.
    std::optional<SearcherMetric> metric = ParseSearcherMetric(config_yaml);
    if (!metric.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--test-mode: ", options.config, " names no searcher.metric"));
    }
    options.config_overrides.push_back(absl::StrCat(
        "searcher={name: single, metric: ", nlohmann::json(metric->name).dump(),
        ", smaller_is_better: ", metric->smaller_is_better ? "true" : "false",
        ", max_length: {batches: ", kTestModeBatches, "}}"));
    options.config_overrides.push_back("max_restarts=0");
    options.follow = !ctx.json;
  }
  v1::CreateExperimentRequest request;
  request.set_config_yaml(std::move(config_yaml));
  request.set_config_path(options.config);
  request.set_force(options.force);
  request.set_paused(options.paused);
  request.set_template_(options.template_name);
  for (const std::string& item : options.config_overrides) request.add_config_overrides(item);
  if (!options.context_dir.empty()) {
    ASSIGN_OR_RETURN(std::vector<v1::ContextFile> files,
                     ReadContextDir(options.context_dir));
    for (v1::ContextFile& file : files) *request.add_context() = std::move(file);
  }
  if (!options.test_mode) return Submit(ctx, request, options, "");
  int64_t id = 0;
  const absl::Status run =
      Submit(ctx, request, options,
             " (test mode: one trial, " + std::to_string(kTestModeBatches) + " batches)", &id);
  // As Determined's test mode, the test experiment is archived (det e list --all shows it)
  // once it has ended; with --json it is not followed, so it stays as created.
  if (id != 0 && !ctx.json) {
    ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
    const absl::Status archived = api->ArchiveExperiment(id);
    if (archived.ok()) {
      ctx.out << "Archived test experiment " << id << " (det e list --all shows it)\n";
    } else {
      ctx.err << "det: test experiment " << id << " was not archived: " << archived.message()
              << '\n';
    }
  }
  RETURN_IF_ERROR(run);
  if (!ctx.json) ctx.out << "Model definition test succeeded\n";
  return absl::OkStatus();
}

// The parent's model context: the files of the serialized ModelContext GetModelDef returns.
absl::StatusOr<std::vector<v1::ContextFile>> ModelDefFiles(ApiClient& api, int64_t id) {
  ASSIGN_OR_RETURN(v1::GetModelDefResponse response, api.GetModelDef(id));
  v1::ModelContext context;
  if (!context.ParseFromString(response.model_context())) {
    return absl::DataLossError(
        absl::StrCat("experiment ", id, "'s model definition could not be read"));
  }
  return std::vector<v1::ContextFile>(context.files().begin(), context.files().end());
}

struct ForkOptions {
  int64_t parent = 0;
  // -c/--config-file: the fork's config instead of the parent's.
  std::string config_file;
  CreateOptions create;
};

// det experiment fork: a new experiment from the parent's config (or --config-file) and
// the parent's model definition, with --config overrides.
absl::Status Fork(CliContext& ctx, const ForkOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetExperimentResponse parent, api->GetExperiment(options.parent));
  v1::CreateExperimentRequest request;
  if (options.config_file.empty()) {
    request.set_config_yaml(parent.experiment().config_yaml());
    request.set_config_path(absl::StrCat("experiment ", options.parent, "'s config"));
  } else {
    ASSIGN_OR_RETURN(*request.mutable_config_yaml(), ReadConfigFile(options.config_file));
    request.set_config_path(options.config_file);
  }
  request.set_force(options.create.force);
  request.set_paused(options.create.paused);
  request.set_template_(options.create.template_name);
  for (const std::string& item : options.create.config_overrides) {
    request.add_config_overrides(item);
  }
  ASSIGN_OR_RETURN(std::vector<v1::ContextFile> files, ModelDefFiles(*api, options.parent));
  for (v1::ContextFile& file : files) *request.add_context() = std::move(file);
  return Submit(ctx, request, options.create, absl::StrCat(" (forked from experiment ",
                                                           options.parent, ")"));
}

// det experiment download-model-def: experiment_ID_model_def.tgz (or -o PATH).
absl::Status DownloadModelDef(CliContext& ctx, int64_t id, std::string output) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(std::vector<v1::ContextFile> files, ModelDefFiles(*api, id));
  if (output.empty()) output = absl::StrCat("experiment_", id, "_model_def.tgz");
  RETURN_IF_ERROR(WriteTarGz(output, files, "model_def"));
  int64_t bytes = 0;
  for (const v1::ContextFile& f : files) bytes += static_cast<int64_t>(f.content().size());
  if (ctx.json) {
    nlohmann::json j = {{"experiment_id", id}, {"output", output}, {"files", files.size()},
                        {"bytes", bytes}};
    ctx.out << j.dump(2) << '\n';
    return absl::OkStatus();
  }
  ctx.out << "Wrote the model definition of experiment " << id << " (" << files.size()
          << " files, " << bytes << " bytes) to " << output << '\n';
  return absl::OkStatus();
}

struct ListOptions {
  // Only that user's experiments, when not empty.
  std::string user;
  // Archived ones too.
  bool all = false;
};

absl::Status List(CliContext& ctx, const ListOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ListExperimentsResponse all;
  for (int offset = 0;;) {
    v1::ListExperimentsRequest request;
    request.set_user(options.user);
    request.set_include_archived(options.all);
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
  ExperimentsTable(all.experiments(), /*archived_column=*/options.all).Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

// The response as JSON, each trial also with "hparams": its hyperparameters as an
// object (hparams_json stays, as the string the master stores).
absl::Status WriteExperimentJson(const v1::GetExperimentResponse& response, std::ostream& out) {
  ASSIGN_OR_RETURN(std::string text, ToJson(response));
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InternalError("describe: the reply is not JSON");
  if (json.contains("trials")) {
    for (nlohmann::json& trial : json["trials"]) {
      nlohmann::json hparams = nlohmann::json::parse(trial.value("hparams_json", ""), nullptr,
                                                     /*allow_exceptions=*/false);
      trial["hparams"] = hparams.is_object() ? hparams : nlohmann::json::object();
    }
  }
  out << json.dump(2) << '\n';
  return absl::OkStatus();
}

struct TrialsOptions {
  int64_t id = 0;
  bool diagnostics = false;
  // describe --metrics: each trial's metric summaries too.
  bool metrics = false;
};

// The experiment's fields (unless `trials_only`) and its trials: for a search, each
// trial's hyperparameters, best searcher metric and early stop, the best marked.
absl::Status DescribeOrListTrials(CliContext& ctx, const TrialsOptions& options,
                                  bool trials_only) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetExperimentResponse response, api->GetExperiment(options.id));
  if (ctx.json) return WriteExperimentJson(response, ctx.out);
  std::optional<SearcherMetric> metric =
      ParseSearcherMetric(response.experiment().config_yaml());
  if (!trials_only) {
    RenderKeyValues(ExperimentFields(response.experiment()), ctx.out);
    if (metric.has_value()) {
      int best = BestTrialIndex(response.trials(), *metric);
      if (best >= 0) {
        const v1::Trial& t = response.trials(best);
        ctx.out << "Best trial: " << t.id() << " (" << metric->name << " "
                << FormatMetric(*BestValue(t, *metric)) << ", "
                << (metric->smaller_is_better ? "smaller" : "larger") << " is better)\n";
      }
    }
    // Why it failed, trial by trial (the experiment's error only sums it up).
    bool first = true;
    for (const v1::Trial& t : response.trials()) {
      const std::string why = TrialError(t);
      if (t.state() != v1::STATE_ERROR || why.empty()) continue;
      if (first) ctx.out << "\nFailed trials:\n";
      first = false;
      ctx.out << "  trial " << t.id() << ": " << why << '\n';
    }
    ctx.out << "\nTrials:\n";
  }
  if (response.trials_size() == 0) {
    ctx.out << "Experiment " << options.id << " has no trials yet.\n";
    return absl::OkStatus();
  }
  TrialsTable(response.trials(), metric, options.diagnostics).Render(ctx.out, ctx.width);
  if (options.metrics) {
    for (const v1::Trial& t : response.trials()) {
      Table table = TrialMetricsTable(t, options.diagnostics);
      ctx.out << "\nTrial " << t.id() << " metrics:\n";
      if (table.num_rows() == 0) {
        ctx.out << "  none reported\n";
      } else {
        table.Render(ctx.out, ctx.width);
      }
    }
  }
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
  ASSIGN_OR_RETURN(v1::PauseExperimentResponse response, api->PauseExperiment(id));
  ctx.out << "Paused experiment " << id << " (running trials checkpoint and stop)\n";
  PrintWarnings(ctx, response.warnings());
  return absl::OkStatus();
}

absl::Status Activate(CliContext& ctx, int64_t id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->ActivateExperiment(id));
  ctx.out << "Activated experiment " << id << '\n';
  return absl::OkStatus();
}

// --config KEY.PATH=VALUE (repeatable) of `cmd`, appended to `into`.
void AddConfigOverrides(CLI::App& cmd, std::vector<std::string>& into, const std::string& help) {
  cmd.add_option("--config", into, help)->take_all()->expected(1);
}

struct ContinueOptions {
  int64_t id = 0;
  // --config-file: a YAML config merged over the experiment's.
  std::string config_file;
  // --config KEY.PATH=VALUE, applied after it.
  std::vector<std::string> config_overrides;
  bool follow = false;
};

// det experiment continue: an ended experiment runs again (Determined's
// ContinueExperiment); its trial resumes from its latest checkpoint.
absl::Status Continue(CliContext& ctx, const ContinueOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ContinueExperimentRequest request;
  request.set_id(options.id);
  if (!options.config_file.empty()) {
    ASSIGN_OR_RETURN(*request.mutable_override_config(), ReadConfigFile(options.config_file));
  }
  for (const std::string& item : options.config_overrides) request.add_config_overrides(item);
  ASSIGN_OR_RETURN(v1::ContinueExperimentResponse response, api->ContinueExperiment(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  ctx.out << "Continued experiment " << options.id << '\n';
  PrintWarnings(ctx, response.warnings());
  if (!options.follow) return absl::OkStatus();
  return FollowExperiment(ctx, *api, options.id);
}

}  // namespace

absl::Status ListExperimentCheckpoints(CliContext& ctx, const CheckpointsOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::ListCheckpointsRequest request;
  request.set_experiment_id(options.id);
  ASSIGN_OR_RETURN(v1::ListCheckpointsResponse response, api->ListCheckpoints(request));
  if (options.best > 0) {
    ASSIGN_OR_RETURN(v1::GetExperimentResponse experiment, api->GetExperiment(options.id));
    std::optional<SearcherMetric> metric =
        ParseSearcherMetric(experiment.experiment().config_yaml());
    if (!metric.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--best: experiment ", options.id, "'s config names no searcher.metric to rank by"));
    }
    // Checkpoints with the metric, best first; those without it cannot be ranked.
    std::vector<v1::Checkpoint> ranked;
    for (const v1::Checkpoint& c : response.checkpoints()) {
      if (c.metrics().count(metric->name) > 0 && c.state() != v1::STATE_DELETED) {
        ranked.push_back(c);
      }
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](const v1::Checkpoint& a, const v1::Checkpoint& b) {
                       double x = a.metrics().at(metric->name), y = b.metrics().at(metric->name);
                       return metric->smaller_is_better ? x < y : x > y;
                     });
    if (ranked.size() > static_cast<size_t>(options.best)) ranked.resize(options.best);
    response.clear_checkpoints();
    for (v1::Checkpoint& c : ranked) *response.add_checkpoints() = std::move(c);
  }
  if (ctx.json) return WriteJson(response, ctx.out);
  if (response.checkpoints_size() == 0) {
    ctx.out << "Experiment " << options.id << " has no checkpoints"
            << (options.best > 0 ? " with its searcher metric" : "") << ".\n";
    return absl::OkStatus();
  }
  CheckpointsTable(response.checkpoints(), options.diagnostics).Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

namespace {

struct WaitOptions {
  int64_t id = 0;
  double interval_seconds = 5;
};

// Polls until the experiment ends; error unless it COMPLETED (so scripts can chain).
absl::Status Wait(CliContext& ctx, const WaitOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  while (true) {
    ASSIGN_OR_RETURN(v1::GetExperimentResponse response, api->GetExperiment(options.id));
    const v1::Experiment& e = response.experiment();
    if (IsTerminal(e.state())) {
      ctx.out << "Experiment " << options.id << " ended: " << StateName(e.state()) << '\n';
      if (e.state() == v1::STATE_COMPLETED) return absl::OkStatus();
      return absl::AbortedError(absl::StrCat("experiment ", options.id, " ended in ",
                                             StateName(e.state()),
                                             e.error().empty() ? "" : ": ", e.error()));
    }
    ctx.sleep(absl::Seconds(options.interval_seconds));
  }
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
  create->add_flag("--paused", create_options->paused,
                   "create it paused: its trials start at det e activate");
  AddConfigOverrides(*create, create_options->config_overrides,
                     "override a config value after the template: KEY.PATH=VALUE (VALUE is "
                     "YAML; repeatable)");
  create->add_flag("--test-mode,--test", create_options->test_mode,
                   "check the config and model definition: one trial of " +
                       std::to_string(kTestModeBatches) +
                       " batches, no restarts, followed to its end (exit status 0 when it "
                       "completed)");
  create->add_flag("--local", create_options->local,
                   "not supported: det runs trials on agents (the error says what to do)");
  create->callback([&ctx, create_options] {
    ctx.action = [&ctx, create_options] { return Create(ctx, *create_options); };
  });

  auto list_options = std::make_shared<ListOptions>();
  CLI::App* list = group->add_subcommand("list", "list experiments")->alias("ls");
  list->add_flag("--json", ctx.json, kJsonHelp);
  list->add_option("-u,--user", list_options->user,
                   "only the experiments of this user (username)");
  list->add_flag("--all,-a", list_options->all, "archived experiments too");
  list->callback([&ctx, list_options] {
    ctx.action = [&ctx, list_options] { return List(ctx, *list_options); };
  });

  auto fork_options = std::make_shared<ForkOptions>();
  CLI::App* fork = group->add_subcommand(
      "fork", "create an experiment from another's config (or -c FILE) and model definition");
  fork->add_option("ID", fork_options->parent, "the experiment to fork")->required();
  fork->add_option("-c,--config-file", fork_options->config_file,
                   "the new experiment's config file (default: the parent's config)");
  CLI::Option* fork_follow = fork->add_flag("-f,--follow", fork_options->create.follow,
                                            "follow the trials' logs until it ends");
  fork->add_flag("--json", ctx.json, kJsonHelp)->excludes(fork_follow);
  fork->add_flag("--force", fork_options->create.force,
                 "queue it even if it can never fit the resource pool as configured");
  fork->add_option("-t,--template", fork_options->create.template_name,
                   "stored template to merge the config over");
  fork->add_flag("--paused", fork_options->create.paused, "create it paused");
  AddConfigOverrides(*fork, fork_options->create.config_overrides,
                     "override a config value: KEY.PATH=VALUE (VALUE is YAML; repeatable)");
  fork->callback([&ctx, fork_options] {
    ctx.action = [&ctx, fork_options] { return Fork(ctx, *fork_options); };
  });

  struct ModelDefOptions {
    int64_t id = 0;
    std::string output;
  };
  auto model_def = std::make_shared<ModelDefOptions>();
  CLI::App* download_model_def = group->add_subcommand(
      "download-model-def",
      "write an experiment's model definition (context directory) to "
      "experiment_ID_model_def.tgz");
  download_model_def->add_option("ID", model_def->id, "experiment ID")->required();
  download_model_def->add_option("-o,--output", model_def->output,
                                 "the .tgz file to write (default: experiment_ID_model_def.tgz)");
  download_model_def->add_flag("--json", ctx.json, kJsonHelp);
  download_model_def->callback([&ctx, model_def] {
    ctx.action = [&ctx, model_def] { return DownloadModelDef(ctx, model_def->id, model_def->output); };
  });

  for (bool trials_only : {false, true}) {
    auto options = std::make_shared<TrialsOptions>();
    CLI::App* cmd =
        trials_only
            ? group->add_subcommand("list-trials", "list an experiment's trials: "
                                                   "hyperparameters, best metric, early stops")
                  ->alias("lt")
            : group->add_subcommand("describe", "describe an experiment and its trials");
    cmd->add_option("ID", options->id, "experiment ID")->required();
    cmd->add_flag("--json", ctx.json, kJsonHelp);
    cmd->add_flag("--diagnostics", options->diagnostics, kDiagnosticsHelp);
    if (!trials_only) {
      cmd->add_flag("--metrics", options->metrics,
                    "also each trial's metrics: min, max, last and count of every training "
                    "and validation metric");
    }
    cmd->callback([&ctx, options, trials_only] {
      ctx.action = [&ctx, options, trials_only] {
        return DescribeOrListTrials(ctx, *options, trials_only);
      };
    });
  }
  AddIdCommand(*group, ctx, "config", "print an experiment's effective config", Config);
  AddIdCommand(*group, ctx, "kill", "kill an experiment", Kill);
  AddIdCommand(*group, ctx, "pause", "pause an experiment: its trials checkpoint and stop", Pause);
  AddIdCommand(*group, ctx, "activate", "resume a paused experiment", Activate);
  auto continue_options = std::make_shared<ContinueOptions>();
  CLI::App* cont = group->add_subcommand(
      "continue",
      "run an ended experiment again: a single-trial one's trial resumes from its latest "
      "checkpoint (with --config/--config-file changes); a grid or random search's trials "
      "that did not complete resume");
  cont->add_option("ID", continue_options->id, "the experiment to continue")->required();
  cont->add_option("--config-file", continue_options->config_file,
                   "a YAML config merged over the experiment's (single-trial experiments)");
  AddConfigOverrides(*cont, continue_options->config_overrides,
                     "override a config value: KEY.PATH=VALUE (VALUE is YAML; repeatable; "
                     "single-trial experiments)");
  CLI::Option* cont_follow =
      cont->add_flag("-f,--follow-first-trial,--follow", continue_options->follow,
                     "follow the trials' logs until it ends");
  cont->add_flag("--json", ctx.json, kJsonHelp)->excludes(cont_follow);
  cont->callback([&ctx, continue_options] {
    ctx.action = [&ctx, continue_options] { return Continue(ctx, *continue_options); };
  });
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
      PrintWarnings(ctx, r.warnings());
      return absl::OkStatus();
    };
  });
  auto checkpoints = std::make_shared<CheckpointsOptions>();
  CLI::App* lc = group->add_subcommand(
      "list-checkpoints", "list an experiment's checkpoints (deleted ones included, as DELETED)")
      ->alias("lc");
  lc->add_option("ID", checkpoints->id, "experiment ID")->required();
  lc->add_option("--best", checkpoints->best,
                 "only the N best by the searcher's metric, best first")
      ->check(CLI::PositiveNumber);
  lc->add_flag("--json", ctx.json, kJsonHelp);
  lc->add_flag("--diagnostics", checkpoints->diagnostics, kDiagnosticsHelp);
  lc->callback([&ctx, checkpoints] {
    ctx.action = [&ctx, checkpoints] { return ListExperimentCheckpoints(ctx, *checkpoints); };
  });

  struct LogsOptions {
    int64_t id = 0;
    bool follow = false;
  };
  auto logs_options = std::make_shared<LogsOptions>();
  CLI::App* logs = group->add_subcommand(
      "logs", "print the logs of all of an experiment's trials, each line with its trial");
  logs->add_option("ID", logs_options->id, "experiment ID")->required();
  logs->add_flag("-f,--follow", logs_options->follow,
                 "wait for new lines until the experiment ends, then print a summary");
  logs->callback([&ctx, logs_options] {
    ctx.action = [&ctx, logs_options]() -> absl::Status {
      ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
      return FollowExperiment(ctx, *api, logs_options->id, logs_options->follow);
    };
  });

  RegisterExperimentEditCommands(*group, *set, ctx);

  auto wait = std::make_shared<WaitOptions>();
  CLI::App* wait_cmd = group->add_subcommand(
      "wait", "wait until an experiment ends; fails unless it COMPLETED");
  wait_cmd->add_option("ID", wait->id, "experiment ID")->required();
  wait_cmd->add_option("--interval", wait->interval_seconds, "seconds between polls")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  wait_cmd->callback([&ctx, wait] { ctx.action = [&ctx, wait] { return Wait(ctx, *wait); }; });
}

}  // namespace det::cli
