// SlurmClient: the master's narrow view of Slurm (submit a batch job, list jobs and nodes,
// signal and cancel a job), and CommandSlurmClient, which runs Slurm's own tools (sbatch,
// squeue, sinfo, scancel; found in PATH, configured by SLURM_CONF or /etc/slurm) with argv,
// never a shell.
// Calls block (up to a timeout each): the resource manager makes them off the master's
// loop.
#ifndef DET_MASTER_SLURM_SLURM_CLIENT_H_
#define DET_MASTER_SLURM_SLURM_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "master/slurm/batch_job.h"

namespace det::master::slurm {

// Thread-compatible: one caller at a time.
class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // sbatch `args` with `script` (written to a private file for the call); the job id.
  virtual absl::StatusOr<std::string> Submit(const std::vector<std::string>& args,
                                             const std::string& script) = 0;
  // Every job slurmctld remembers (pending, running, and ended ones for MinJobAge).
  virtual absl::StatusOr<std::vector<JobInfo>> Jobs() = 0;
  // Every node slurmctld knows, with its state (sinfo).
  virtual absl::StatusOr<std::vector<NodeInfo>> Nodes() = 0;
  // scancel --signal=SIGNAL JOB (its steps' tasks only, not the batch shell).
  virtual absl::Status Signal(const std::string& job_id, const std::string& signal) = 0;
  // scancel JOB: SIGTERM to everything of it, SIGKILL after Slurm's KillWait.
  virtual absl::Status Cancel(const std::string& job_id) = 0;
};

// Runs the tools; batch scripts are written under `spool_dir` (created mode 0700) and
// removed once sbatch has read them.
std::unique_ptr<SlurmClient> NewCommandSlurmClient(std::string spool_dir,
                                                   absl::Duration timeout = absl::Seconds(30));

}  // namespace det::master::slurm

#endif  // DET_MASTER_SLURM_SLURM_CLIENT_H_
