// det job list|update, det task list, det resource-pool|rp list: the scheduler's view.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

constexpr char kJsonHelp[] = "print machine-readable JSON";

absl::Status ListJobs(CliContext& ctx, const std::string& pool) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListJobsResponse response, api->ListJobs(pool));
  if (ctx.json) return WriteJson(response, ctx.out);
  Table table({"#", "Job ID", "Name", "Priority", "Pool", "State", "Slots/Trial", "Queued",
               "Running", "Slots Acquired", "Reason"});
  int position = 0;
  for (const v1::Job& j : response.jobs()) {
    table.AddRow({absl::StrCat(++position), absl::StrCat(j.experiment_id()), j.name(),
                  absl::StrCat(j.priority()), j.resource_pool(), j.state(),
                  absl::StrCat(j.slots_per_trial()), absl::StrCat(j.queued_trials()),
                  absl::StrCat(j.running_trials()), absl::StrCat(j.slots_acquired()), j.reason()});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status UpdateJob(CliContext& ctx, int64_t id, int priority) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  RETURN_IF_ERROR(api->UpdateJobPriority(id, priority));
  ctx.out << "Job " << id << " priority set to " << priority << "\n";
  return absl::OkStatus();
}

std::string Placement(const google::protobuf::RepeatedPtrField<v1::RankPlacement>& ranks) {
  std::vector<std::string> parts;
  for (const auto& r : ranks) {
    parts.push_back(absl::StrCat(r.rank(), "@", r.agent_id(),
                                 r.slot_ids().empty() ? "" : absl::StrCat("[", absl::StrJoin(r.slot_ids(), ","), "]")));
  }
  return absl::StrJoin(parts, " ");
}

absl::Status ListTasks(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListTasksResponse response, api->ListTasks());
  if (ctx.json) return WriteJson(response, ctx.out);
  Table table({"Task ID", "Type", "Experiment", "Trial", "State", "Slots", "Pool", "Agent",
               "Ranks (rank@agent[slots])", "Start Time", "Details"});
  for (const v1::Task& t : response.tasks()) {
    // Why it waits or failed; for a checkpoint GC task otherwise what it deletes.
    std::string details = !t.error().empty() ? t.error() : t.pending_reason();
    if (details.empty() && t.checkpoint_uuids_size() > 0) {
      details = absl::StrCat(t.checkpoint_uuids_size(), " checkpoint(s)");
    }
    table.AddRow({t.allocation_id(), t.type(), absl::StrCat(t.experiment_id()),
                  absl::StrCat(t.trial_id()), StateName(t.state()), absl::StrCat(t.slots()),
                  t.resource_pool(), absl::StrJoin(t.agents(), ","), Placement(t.ranks()),
                  FormatTimeMs(t.start_time_ms()), details});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status ListPools(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListResourcePoolsResponse response, api->ListResourcePools());
  if (ctx.json) return WriteJson(response, ctx.out);
  Table table({"Name", "Description", "Agents", "Connected", "Agent Sizes", "Slots", "Used",
               "Queued Trials", "Preemption"});
  for (const v1::ResourcePool& p : response.pools()) {
    table.AddRow({p.name(), p.description(), absl::StrCat(p.agents()),
                  absl::StrCat(p.connected_agents()), absl::StrJoin(p.agent_sizes(), ","),
                  absl::StrCat(p.slots()), absl::StrCat(p.slots_used()),
                  absl::StrCat(p.queued_trials()), p.preemption() ? "yes" : "no"});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

}  // namespace

void RegisterSchedulingCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* job = app.add_subcommand("job", "the scheduler's queue")->alias("j");
  job->require_subcommand(1);
  auto pool = std::make_shared<std::string>();
  CLI::App* list = job->add_subcommand("list", "list jobs in the order they are scheduled");
  list->add_option("--resource-pool", *pool, "only this pool");
  list->add_flag("--json", ctx.json, kJsonHelp);
  list->callback([&ctx, pool] { ctx.action = [&ctx, pool] { return ListJobs(ctx, *pool); }; });
  auto id = std::make_shared<int64_t>(0);
  auto priority = std::make_shared<int>(0);
  CLI::App* update = job->add_subcommand("update", "change a job's priority");
  update->add_option("JOB_ID", *id, "job (experiment) ID")->required();
  update->add_option("--priority", *priority, "1..99, lower is more important")->required();
  update->callback([&ctx, id, priority] {
    ctx.action = [&ctx, id, priority] { return UpdateJob(ctx, *id, *priority); };
  });

  CLI::App* task = app.add_subcommand(
      "task", "trial allocations and checkpoint garbage-collection (zero-slot) tasks");
  task->require_subcommand(1);
  CLI::App* tasks = task->add_subcommand(
      "list", "list running trials and queued, running and recently ended checkpoint GC tasks");
  tasks->add_flag("--json", ctx.json, kJsonHelp);
  tasks->callback([&ctx] { ctx.action = [&ctx] { return ListTasks(ctx); }; });

  CLI::App* rp = app.add_subcommand("resource-pool", "resource pools")->alias("rp");
  rp->require_subcommand(1);
  CLI::App* pools = rp->add_subcommand("list", "list resource pools");
  pools->add_flag("--json", ctx.json, kJsonHelp);
  pools->callback([&ctx] { ctx.action = [&ctx] { return ListPools(ctx); }; });
}

}  // namespace det::cli
