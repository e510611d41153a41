// det trial|t describe|logs|kill|download
#include <CLI/CLI.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";
// Lines per GetTrialLogs page.
constexpr int kLogPageLines = 1000;
// Long poll of `det trial logs -f`.
constexpr int kFollowWaitMs = 5000;

// Per agent of the trial, over its recent host metrics samples: the latest and the mean
// CPU utilisation, memory in use (total - available) and of each GPU its utilisation and
// memory in use, then the latest disk and network rates.
Table SystemMetricsTable(const google::protobuf::RepeatedPtrField<v1::SystemMetrics>& samples) {
  std::map<std::string, std::vector<const v1::SystemMetrics*>> by_agent;
  for (const auto& m : samples) by_agent[m.agent_id()].push_back(&m);
  Table table({"Agent", "Samples", "Latest", "CPU (latest, mean)", "Memory Used (latest, mean)",
               "GPUs (util latest/mean, memory used latest/mean)", "Disk Read", "Disk Write",
               "Net Sent", "Net Received"});
  auto rate = [](double bytes_per_second) {
    return absl::StrCat(FormatBytes(static_cast<uint64_t>(bytes_per_second)), "/s");
  };
  auto used = [](int64_t total, int64_t free) {
    return static_cast<uint64_t>(std::max<int64_t>(total - free, 0));
  };
  for (auto& [agent, list] : by_agent) {
    std::sort(list.begin(), list.end(),
              [](const auto* a, const auto* b) { return a->time_ms() < b->time_ms(); });
    const v1::SystemMetrics* m = list.back();
    double cpu = 0, memory = 0;
    struct Gpu {
      double util = 0, memory = 0;
      int n = 0;
    };
    std::map<std::string, Gpu> gpu_means;
    for (const auto* s : list) {
      cpu += s->cpu_utilization_percent();
      memory += static_cast<double>(used(s->memory_total_bytes(), s->memory_free_bytes()));
      for (const auto& g : s->gpus()) {
        Gpu& sum = gpu_means[g.slot_id()];
        sum.util += g.utilization_percent();
        sum.memory += static_cast<double>(used(g.memory_total_bytes(), g.memory_free_bytes()));
        ++sum.n;
      }
    }
    const double n = static_cast<double>(list.size());
    std::string gpus;
    for (const auto& g : m->gpus()) {
      const Gpu& sum = gpu_means[g.slot_id()];
      absl::StrAppend(&gpus, gpus.empty() ? "" : "; ", g.slot_id(), ": ",
                      absl::StrFormat("%.3g%%/%.3g%%", g.utilization_percent(),
                                      sum.util / sum.n),
                      ", ", FormatBytes(used(g.memory_total_bytes(), g.memory_free_bytes())),
                      "/", FormatBytes(static_cast<uint64_t>(sum.memory / sum.n)));
    }
    table.AddRow({agent, absl::StrCat(list.size()), FormatTimeMs(m->time_ms()),
                  absl::StrFormat("%.3g%%, %.3g%%", m->cpu_utilization_percent(), cpu / n),
                  absl::StrCat(FormatBytes(used(m->memory_total_bytes(), m->memory_free_bytes())),
                               ", ", FormatBytes(static_cast<uint64_t>(memory / n))),
                  gpus.empty() ? "-" : gpus,
                  absl::StrCat(rate(m->disk_read_bytes_per_second()), ", ",
                               FormatRate(m->disk_read_iops(), "IOPS")),
                  absl::StrCat(rate(m->disk_write_bytes_per_second()), ", ",
                               FormatRate(m->disk_write_iops(), "IOPS")),
                  rate(m->network_sent_bytes_per_second()),
                  rate(m->network_received_bytes_per_second())});
  }
  return table;
}

struct DescribeOptions {
  int64_t id = 0;
  bool diagnostics = false;
};

absl::Status Describe(CliContext& ctx, const DescribeOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetTrialResponse response, api->GetTrial(options.id));
  if (ctx.json) return WriteJson(response, ctx.out);
  RenderKeyValues(TrialFields(response.trial()), ctx.out);
  Table metrics = TrialMetricsTable(response.trial(), options.diagnostics);
  if (metrics.num_rows() > 0) {
    ctx.out << "\nMetrics:\n";
    metrics.Render(ctx.out, ctx.width);
  }
  // Timings over every report of the trial (GetTrialMetrics, group "timings").
  v1::GetTrialMetricsRequest timings_request;
  timings_request.set_trial_id(options.id);
  timings_request.set_group("timings");
  timings_request.set_max_points(0);
  absl::StatusOr<v1::GetTrialMetricsResponse> fetched = api->GetTrialMetrics(timings_request);
  // A master without GetTrialMetrics: the latest report's summary below still shows.
  if (!fetched.ok() && !absl::IsUnimplemented(fetched.status())) return fetched.status();
  const v1::GetTrialMetricsResponse timing_reports =
      fetched.ok() ? *std::move(fetched) : v1::GetTrialMetricsResponse();
  Table timings = TimingsOverReportsTable(timing_reports.metrics());
  const auto& summary = response.trial().timings_summary();
  auto rate = summary.find("samples_per_second");
  auto batches = summary.find("batches_per_second");
  if (timings.num_rows() > 0 || rate != summary.end() || batches != summary.end()) {
    ctx.out << "\nTimings (per batch, over " << timing_reports.metrics_size() << " reports):\n";
    if (timings.num_rows() > 0) timings.Render(ctx.out, ctx.width);
    if (rate != summary.end()) {
      ctx.out << "Throughput: " << FormatRate(rate->second.last(), "samples/s") << "\n";
    }
    if (batches != summary.end()) {
      ctx.out << "Batches per second: " << FormatRate(batches->second.last(), "batches/s")
              << "\n";
    }
  }
  const v1::Allocation& allocation = response.trial().allocation();
  if (!allocation.id().empty()) {
    ctx.out << "\nAllocation " << allocation.id() << " (" << StateName(allocation.state()) << "):\n";
    RanksTable(allocation).Render(ctx.out, ctx.width);
  }
  if (response.system_metrics_size() > 0) {
    ctx.out << "\nSystem metrics:\n";
    SystemMetricsTable(response.system_metrics()).Render(ctx.out, ctx.width);
  }
  return absl::OkStatus();
}

// Log levels, lowest first, as Determined's --level takes them.
constexpr const char* kLevels[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"};

// The level a line was logged at: its message's leading level word ("INFO: ...",
// "ERROR:root:...", "[WARNING] ...", "WARN ..."; FATAL counts as CRITICAL), else INFO.
int LineLevel(absl::string_view message) {
  absl::string_view m = absl::StripLeadingAsciiWhitespace(message);
  if (absl::ConsumePrefix(&m, "[")) m = absl::StripLeadingAsciiWhitespace(m);
  size_t end = 0;
  while (end < m.size() && absl::ascii_isalpha(static_cast<unsigned char>(m[end]))) ++end;
  const std::string word = absl::AsciiStrToUpper(m.substr(0, end));
  const bool delimited = end < m.size() && (m[end] == ':' || m[end] == ' ' || m[end] == ']');
  if (!delimited) return 2;
  if (word == "WARN") return 3;
  if (word == "FATAL") return 5;
  for (int i = 0; i < 6; ++i) {
    if (word == kLevels[i]) return i;
  }
  return 2;
}

// Determined's log source of a line: "container" for the workers' output, else "agent"
// or "master".
std::string LineSource(const v1::LogLine& line) {
  if (line.stream() == "agent" || line.stream() == "master") return line.stream();
  return "container";
}

struct LogFilter {
  std::vector<std::string> agent_ids;
  std::vector<std::string> sources;   // container, agent, master
  std::vector<std::string> stdtypes;  // stdout, stderr
  std::string level;                  // "": every level

  bool Keeps(const v1::LogLine& line) const {
    auto in = [](const std::vector<std::string>& set, const std::string& v) {
      return set.empty() || std::find(set.begin(), set.end(), v) != set.end();
    };
    if (!in(agent_ids, line.agent_id()) || !in(sources, LineSource(line))) return false;
    if (!stdtypes.empty() && !in(stdtypes, line.stream())) return false;
    if (level.empty()) return true;
    int min = 0;
    while (min < 6 && level != kLevels[min]) ++min;
    return LineLevel(line.message()) >= min;
  }
};

struct LogsOptions {
  int64_t trial_id = 0;
  LogFilter filter;
  bool follow = false;
  int32_t rank = 0;
  CLI::Option* rank_option = nullptr;
  // > 0: only the first `head` lines / the last `tail` lines there are now.
  int64_t head = 0;
  int64_t tail = 0;
  bool timestamps = false;
};

absl::Status Logs(CliContext& ctx, const LogsOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  TrialLogCursor cursor;
  cursor.trial_id = options.trial_id;
  if (options.rank_option->count() > 0) cursor.rank = options.rank;
  int64_t printed = 0;
  auto print = [&ctx, &options, &printed](const v1::LogLine& line) {
    ++printed;
    if (ctx.json) {
      // One JSON object per line; a line that cannot be converted is impossible for a
      // well-formed message.
      (void)WriteJson(line, ctx.out, /*pretty=*/false);
      return;
    }
    if (options.timestamps) {
      ctx.out << FormatLogTimeMs(line.time_ms()) << ' ';
    }
    ctx.out << FormatLogLine(line) << '\n';
  };
  if (options.tail > 0) {
    // Every line there is now, keeping the last `tail`; following goes on from there.
    std::deque<v1::LogLine> last;
    while (!cursor.done) {
      ASSIGN_OR_RETURN(int n, FetchTrialLogs(*api, cursor, 0, [&](const v1::LogLine& line) {
        if (!options.filter.Keeps(line)) return;
        last.push_back(line);
        if (static_cast<int64_t>(last.size()) > options.tail) last.pop_front();
      }));
      if (n == 0) break;
    }
    for (const v1::LogLine& line : last) print(line);
    ctx.out.flush();
    if (!options.follow) return absl::OkStatus();
  }
  while (!cursor.done) {
    ASSIGN_OR_RETURN(int n, FetchTrialLogs(*api, cursor, options.follow ? kFollowWaitMs : 0,
                                           [&](const v1::LogLine& line) {
                                             if (options.head > 0 && printed >= options.head) {
                                               return;
                                             }
                                             if (!options.filter.Keeps(line)) return;
                                             print(line);
                                           }));
    ctx.out.flush();
    if (options.head > 0 && printed >= options.head) break;
    if (!options.follow && n == 0) break;
  }
  return absl::OkStatus();
}

struct DownloadOptions {
  int64_t trial_id = 0;
  bool best = false;
  bool latest = false;
  std::string uuid;
  std::string output_dir;
  std::string sort_by;
  std::optional<bool> smaller_is_better;
  bool quiet = false;
};

// det trial download: the trial's best (by --sort-by, else the searcher's metric) or latest
// checkpoint, or one by UUID, copied as det checkpoint download does.
absl::Status Download(CliContext& ctx, const DownloadOptions& o) {
  if (static_cast<int>(o.best) + static_cast<int>(o.latest) + static_cast<int>(!o.uuid.empty()) !=
      1) {
    return absl::InvalidArgumentError("give exactly one of --best, --latest and --uuid");
  }
  if (!o.sort_by.empty() && !o.smaller_is_better.has_value()) {
    return absl::InvalidArgumentError(
        "--sort-by needs --smaller-is-better true|false (e.g. false for accuracy)");
  }
  if ((!o.sort_by.empty() || o.smaller_is_better.has_value()) && !o.best) {
    return absl::InvalidArgumentError("--sort-by and --smaller-is-better go with --best");
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetTrialResponse trial, api->GetTrial(o.trial_id));
  v1::ListCheckpointsRequest request;
  request.set_experiment_id(trial.trial().experiment_id());
  request.set_trial_id(o.trial_id);
  ASSIGN_OR_RETURN(v1::ListCheckpointsResponse response, api->ListCheckpoints(request));
  std::vector<const v1::Checkpoint*> live;
  for (const v1::Checkpoint& c : response.checkpoints()) {
    if (c.trial_id() == o.trial_id && c.state() != v1::STATE_DELETED) live.push_back(&c);
  }
  if (!o.uuid.empty()) {
    for (const v1::Checkpoint& c : response.checkpoints()) {
      if (c.uuid() == o.uuid) return DownloadCheckpoint(ctx, o.uuid, o.output_dir, o.quiet);
    }
    return absl::NotFoundError(
        absl::StrCat("trial ", o.trial_id, " has no checkpoint ", o.uuid));
  }
  if (live.empty()) {
    return absl::NotFoundError(absl::StrCat("trial ", o.trial_id, " has no checkpoint to download"));
  }
  const v1::Checkpoint* chosen = nullptr;
  if (o.latest) {
    for (const v1::Checkpoint* c : live) {
      if (chosen == nullptr || c->total_batches() > chosen->total_batches() ||
          (c->total_batches() == chosen->total_batches() &&
           c->report_time_ms() > chosen->report_time_ms())) {
        chosen = c;
      }
    }
  } else {
    SearcherMetric metric;
    if (!o.sort_by.empty()) {
      metric = {o.sort_by, *o.smaller_is_better};
    } else {
      ASSIGN_OR_RETURN(v1::GetExperimentResponse e,
                       api->GetExperiment(trial.trial().experiment_id()));
      std::optional<SearcherMetric> searcher = ParseSearcherMetric(e.experiment().config_yaml());
      if (!searcher.has_value()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--best: experiment ", trial.trial().experiment_id(),
            "'s config names no searcher.metric; pass --sort-by and --smaller-is-better"));
      }
      metric = *searcher;
    }
    for (const v1::Checkpoint* c : live) {
      auto it = c->metrics().find(metric.name);
      if (it == c->metrics().end()) continue;
      if (chosen == nullptr) {
        chosen = c;
        continue;
      }
      const double best = chosen->metrics().at(metric.name);
      if (metric.smaller_is_better ? it->second < best : it->second > best) chosen = c;
    }
    if (chosen == nullptr) {
      return absl::NotFoundError(absl::StrCat("--best: no checkpoint of trial ", o.trial_id,
                                              " has the metric '", metric.name,
                                              "' (use --latest)"));
    }
  }
  return DownloadCheckpoint(ctx, chosen->uuid(), o.output_dir, o.quiet);
}

}  // namespace

absl::StatusOr<int> FetchTrialLogs(ApiClient& api, TrialLogCursor& cursor, int wait_ms,
                                   const std::function<void(const v1::LogLine&)>& emit) {
  v1::GetTrialLogsRequest request;
  request.set_trial_id(cursor.trial_id);
  request.set_after_id(cursor.after_id);
  request.set_limit(kLogPageLines);
  if (cursor.rank.has_value()) request.set_rank(*cursor.rank);
  request.set_wait_ms(wait_ms);
  ASSIGN_OR_RETURN(v1::GetTrialLogsResponse response, api.GetTrialLogs(request));
  for (const v1::LogLine& line : response.lines()) {
    emit(line);
    cursor.after_id = std::max(cursor.after_id, line.id());
  }
  if (response.done()) cursor.done = true;
  return response.lines_size();
}

void RegisterTrialCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("trial", "inspect trials")->alias("t");
  group->require_subcommand(1);

  auto describe_options = std::make_shared<DescribeOptions>();
  CLI::App* describe = group->add_subcommand("describe", "describe a trial");
  describe->add_option("ID", describe_options->id, "trial ID")->required();
  describe->add_flag("--json", ctx.json, kJsonHelp);
  describe->add_flag("--diagnostics", describe_options->diagnostics,
                     "also show diagnostic metrics (named diag/...: parameter hashes, checksums)");
  describe->callback([&ctx, describe_options] {
    ctx.action = [&ctx, describe_options] { return Describe(ctx, *describe_options); };
  });

  auto kill_id = std::make_shared<int64_t>(0);
  CLI::App* kill =
      group->add_subcommand("kill", "kill a trial (its experiment goes on with its other trials)");
  kill->add_option("ID", *kill_id, "trial ID")->required();
  kill->callback([&ctx, kill_id] {
    ctx.action = [&ctx, kill_id]() -> absl::Status {
      ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
      RETURN_IF_ERROR(api->KillTrial(*kill_id));
      ctx.out << "Killing trial " << *kill_id << " (CANCELED once its workers exited)\n";
      return absl::OkStatus();
    };
  });

  auto download_options = std::make_shared<DownloadOptions>();
  CLI::App* download = group->add_subcommand(
      "download", "copy a trial's checkpoint here (its storage must be mounted on this machine)");
  download->add_option("ID", download_options->trial_id, "trial ID")->required();
  download->add_flag("--best", download_options->best,
                     "the checkpoint with the best validation metric (the searcher's, or "
                     "--sort-by)");
  download->add_flag("--latest", download_options->latest, "the most recent checkpoint");
  download->add_option("--uuid", download_options->uuid, "the checkpoint with this UUID");
  download->add_option("-o,--output-dir", download_options->output_dir,
                       "directory to copy into (default: checkpoints/UUID)");
  download->add_option("--sort-by", download_options->sort_by,
                       "with --best: the validation metric to rank by (needs "
                       "--smaller-is-better)");
  download->add_option_function<std::string>(
      "--smaller-is-better",
      [download_options](const std::string& v) {
        download_options->smaller_is_better = v == "true" || v == "True" || v == "1" ||
                                              v == "yes";
      },
      "with --sort-by: true or false")
      ->check(CLI::IsMember({"true", "false", "True", "False", "1", "0", "yes", "no"}));
  download->add_flag("-q,--quiet", download_options->quiet, "print only the directory");
  download->add_flag("--json", ctx.json, kJsonHelp);
  download->callback([&ctx, download_options] {
    ctx.action = [&ctx, download_options] { return Download(ctx, *download_options); };
  });

  auto logs_options = std::make_shared<LogsOptions>();
  CLI::App* logs = group->add_subcommand("logs", "print a trial's logs");
  logs->add_option("ID", logs_options->trial_id, "trial ID")->required();
  CLI::Option* follow = logs->add_flag("-f,--follow", logs_options->follow,
                                       "wait for new lines until the trial ends");
  logs_options->rank_option =
      logs->add_option("--rank", logs_options->rank, "only the lines of this rank");
  logs->add_flag("--json", ctx.json, "print each line as a JSON object");
  CLI::Option* head = logs->add_option("--head", logs_options->head, "only the first N lines")
                          ->check(CLI::PositiveNumber)
                          ->excludes(follow);
  logs->add_option("--tail", logs_options->tail,
                   "only the last N lines there are now (then new ones with -f)")
      ->check(CLI::PositiveNumber)
      ->excludes(head);
  logs->add_flag("-t,--timestamps", logs_options->timestamps,
                 "prefix each line with the time the agent read it (UTC)");
  LogFilter& filter = logs_options->filter;
  logs->add_option("--agent-id", filter.agent_ids,
                   "only the lines of this agent (repeat for several)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  logs->add_option("--source", filter.sources,
                   "only lines from this source: container (the workers' output), agent or "
                   "master (repeat for several)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"container", "agent", "master"}));
  logs->add_option("--stdtype", filter.stdtypes,
                   "only the workers' lines of this stream: stdout or stderr (repeat for "
                   "several)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"stdout", "stderr"}));
  logs->add_option("--level", filter.level,
                   "only lines of this level or higher, read from the line's leading level "
                   "word (\"INFO: ...\", det.LOG_FORMAT); a line without one counts as INFO")
      ->transform(CLI::IsMember({"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"},
                                CLI::ignore_case));
  logs->callback([&ctx, logs_options] {
    ctx.action = [&ctx, logs_options] { return Logs(ctx, *logs_options); };
  });
}

}  // namespace det::cli
