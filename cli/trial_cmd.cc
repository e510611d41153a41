// det trial|t describe|logs
#include <CLI/CLI.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
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

// The latest host metrics sample of each of the trial's agents.
Table SystemMetricsTable(const google::protobuf::RepeatedPtrField<v1::SystemMetrics>& samples) {
  std::map<std::string, const v1::SystemMetrics*> latest;
  for (const auto& m : samples) latest[m.agent_id()] = &m;
  Table table({"Agent", "Time", "CPU", "Free Memory", "Disk Read", "Disk Write", "Net Sent",
               "Net Received", "GPUs (util, free)"});
  auto rate = [](double bytes_per_second) {
    return absl::StrCat(FormatBytes(static_cast<uint64_t>(bytes_per_second)), "/s");
  };
  for (const auto& [agent, m] : latest) {
    std::string gpus;
    for (const auto& g : m->gpus()) {
      absl::StrAppend(&gpus, gpus.empty() ? "" : "; ", g.slot_id(), ": ",
                      absl::StrFormat("%.3g", g.utilization_percent()), "%, ",
                      FormatBytes(static_cast<uint64_t>(g.memory_free_bytes())));
    }
    table.AddRow({agent, FormatTimeMs(m->time_ms()),
                  absl::StrFormat("%.3g%%", m->cpu_utilization_percent()),
                  FormatBytes(static_cast<uint64_t>(m->memory_free_bytes())),
                  absl::StrCat(rate(m->disk_read_bytes_per_second()), ", ",
                               FormatRate(m->disk_read_iops(), "IOPS")),
                  absl::StrCat(rate(m->disk_write_bytes_per_second()), ", ",
                               FormatRate(m->disk_write_iops(), "IOPS")),
                  rate(m->network_sent_bytes_per_second()),
                  rate(m->network_received_bytes_per_second()), gpus});
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
    metrics.Render(ctx.out);
  }
  Table timings = TrialTimingsTable(response.trial());
  if (timings.num_rows() > 0) {
    ctx.out << "\nTimings (per batch, latest batch group):\n";
    timings.Render(ctx.out);
    auto rate = response.trial().timings_summary().find("samples_per_second");
    if (rate != response.trial().timings_summary().end()) {
      ctx.out << "Throughput: " << FormatRate(rate->second.last(), "samples/s") << "\n";
    }
  }
  const v1::Allocation& allocation = response.trial().allocation();
  if (!allocation.id().empty()) {
    ctx.out << "\nAllocation " << allocation.id() << " (" << StateName(allocation.state()) << "):\n";
    RanksTable(allocation).Render(ctx.out);
  }
  if (response.system_metrics_size() > 0) {
    ctx.out << "\nSystem metrics:\n";
    SystemMetricsTable(response.system_metrics()).Render(ctx.out);
  }
  return absl::OkStatus();
}

struct LogsOptions {
  int64_t trial_id = 0;
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
                                             print(line);
                                           }));
    ctx.out.flush();
    if (options.head > 0 && printed >= options.head) break;
    if (!options.follow && n == 0) break;
  }
  return absl::OkStatus();
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
  logs->callback([&ctx, logs_options] {
    ctx.action = [&ctx, logs_options] { return Logs(ctx, *logs_options); };
  });
}

}  // namespace det::cli
