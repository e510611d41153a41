#include "master/slurm/batch_job.h"

#include <algorithm>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace det::master::slurm {
namespace {

// Single-quoted for sh; InvalidArgument when `value` holds a quote or control character.
absl::StatusOr<std::string> Quoted(const std::string& what, const std::string& value) {
  for (char ch : value) {
    if (ch == '\'' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", value, "\" holds a quote or control character"));
    }
  }
  return absl::StrCat("'", value, "'");
}

}  // namespace

std::string JobNamePrefix(const std::string& cluster_id) {
  return absl::StrCat("det-", cluster_id.substr(0, 8), "-");
}

std::string AllocationOfJob(const std::string& prefix, const std::string& job_name) {
  if (!absl::StartsWith(job_name, prefix) || job_name.size() == prefix.size()) return "";
  return job_name.substr(prefix.size());
}

absl::StatusOr<JobShape> ShapeOf(int slots, const config::SlurmConfig& config) {
  JobShape shape;
  if (slots <= 0) return shape;
  if (config.slots_per_node == 0 || slots <= config.slots_per_node) {
    shape.tasks_per_node = slots;
    return shape;
  }
  if (slots % config.slots_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources.slots_per_trial ", slots, " spans several Slurm nodes and is not a multiple "
        "of resource_manager.slots_per_node ", config.slots_per_node));
  }
  shape.nodes = slots / config.slots_per_node;
  shape.tasks_per_node = config.slots_per_node;
  return shape;
}

absl::StatusOr<BatchJob> MakeBatchJob(const config::SlurmConfig& config, const JobShape& shape,
                                      const std::string& job_name,
                                      const LauncherSettings& settings,
                                      absl::string_view launch) {
  BatchJob job;
  // The site's options first: det's own, after them, win (the job name finds the job again).
  job.sbatch_args = config.sbatch_options;
  for (const std::string& a :
       {std::string("--parsable"), absl::StrCat("--job-name=", job_name),
        absl::StrCat("--nodes=", shape.nodes), absl::StrCat("--ntasks-per-node=", shape.tasks_per_node),
        // Nothing of the master's environment (its secrets) goes to the job.
        std::string("--export=NONE"), std::string("--chdir=/tmp"),
        absl::StrCat("--output=", config.work_dir, "-%j.out")}) {
    job.sbatch_args.push_back(a);
  }
  if (config.slot_type == "cuda") {
    job.sbatch_args.push_back(absl::StrCat(
        "--gres=gpu:", config.gpu_type.empty() ? "" : config.gpu_type + ":", shape.tasks_per_node));
    job.sbatch_args.push_back(absl::StrCat("--cpus-per-task=", config.cpus_per_slot));
  } else {
    job.sbatch_args.push_back(absl::StrCat("--cpus-per-task=", config.cpus_per_slot));
  }
  if (!config.partition.empty()) job.sbatch_args.push_back("--partition=" + config.partition);
  if (!config.account.empty()) job.sbatch_args.push_back("--account=" + config.account);
  if (!config.qos.empty()) job.sbatch_args.push_back("--qos=" + config.qos);

  std::vector<std::pair<std::string, std::string>> env = {
      {kMasterEnv, settings.master_address},
      {kAgentIdEnv, settings.agent_id},
      {kSessionEnv, settings.session_id},
      {kWorkDirEnv, config.work_dir},
      {kWorkerPythonEnv, config.worker_python},
      {kWorkerPathEnv, absl::StrJoin(config.worker_path, ":")},
      {kSlotTypeEnv, config.slot_type},
      {kChiefPortsEnv, absl::StrCat(config.chief_port_first, "-", config.chief_port_last)},
  };
  const std::string encoded = absl::Base64Escape(launch);
  size_t chunks = 0;
  for (size_t at = 0; at < encoded.size(); at += kLaunchChunkBytes, ++chunks) {
    env.emplace_back(absl::StrCat(kLaunchChunkEnvPrefix, chunks),
                     encoded.substr(at, kLaunchChunkBytes));
  }
  env.emplace_back(kLaunchChunksEnv, absl::StrCat(chunks));
  std::string script = absl::StrCat("#!/bin/sh\n# det: ", job_name,
                                    " (written by det-master; see docs/slurm.md)\n");
  for (const auto& [name, value] : env) {
    auto quoted = Quoted(name, value);
    if (!quoted.ok()) return quoted.status();
    absl::StrAppend(&script, "export ", name, "=", *quoted, "\n");
  }
  auto launcher = Quoted("resource_manager.launcher", settings.launcher);
  if (!launcher.ok()) return launcher.status();
  // One launcher per task (rank); --export=ALL: sbatch's --export=NONE would otherwise
  // keep the settings above from the tasks.
  absl::StrAppend(&script, "exec srun --export=ALL --ntasks-per-node=", shape.tasks_per_node,
                  " ", *launcher, "\n");
  job.script = std::move(script);
  return job;
}

std::vector<JobInfo> ParseSqueue(absl::string_view out) {
  std::vector<JobInfo> jobs;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    if (f.size() != 5 || f[0].empty()) continue;
    jobs.push_back({f[0], f[1], f[2], f[3], f[4]});
  }
  return jobs;
}

int GresGpus(absl::string_view gres) {
  int total = 0;
  // Commas also separate socket lists inside "(S:0,1)": count only "gpu..." entries.
  for (absl::string_view entry : absl::StrSplit(gres, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (!absl::ConsumePrefix(&entry, "gpu:")) continue;
    entry = entry.substr(0, entry.find('('));
    // "4" or "a100:4".
    absl::string_view count = entry.substr(entry.rfind(':') == absl::string_view::npos
                                               ? 0
                                               : entry.rfind(':') + 1);
    int n = 0;
    if (absl::SimpleAtoi(count, &n) && n > 0) total += n;
  }
  return total;
}

std::vector<NodeInfo> ParseSinfo(absl::string_view out) {
  std::vector<NodeInfo> nodes;
  std::map<std::string, size_t> index;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    if (f.size() != 5 || f[0].empty()) continue;
    std::string partition = f[4];
    if (!partition.empty() && partition.back() == '*') partition.pop_back();
    auto [it, added] = index.emplace(f[0], nodes.size());
    if (added) {
      NodeInfo node;
      node.name = f[0];
      node.state = f[1];
      (void)absl::SimpleAtoi(f[2], &node.cpus);
      node.gpus = GresGpus(f[3]);
      nodes.push_back(std::move(node));
    }
    if (!partition.empty()) nodes[it->second].partitions.push_back(partition);
  }
  return nodes;
}

bool Started(const std::string& state) {
  return state == "RUNNING" || state == "COMPLETING" || state == "SUSPENDED" ||
         state == "STOPPED" || state == "SIGNALING" || state == "STAGE_OUT";
}

bool Ended(const std::string& state) {
  return !Started(state) && state != "PENDING" && state != "CONFIGURING" &&
         state != "REQUEUED" && state != "REQUEUE_HOLD" && state != "REQUEUE_FED" &&
         state != "RESIZING" && state != "RESV_DEL_HOLD" && state != "";
}

int ChiefPort(int64_t job_id, int first, int last) {
  const int64_t span = std::max(1, last - first + 1);
  return first + static_cast<int>(((job_id % span) + span) % span);
}

}  // namespace det::master::slurm
