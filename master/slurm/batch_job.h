// The Slurm side of a trial's run, as pure functions: the job's name (how the master finds
// its jobs again after a restart), its shape (nodes and tasks for the trial's slots), the
// sbatch arguments and batch script that start det-slurm-launcher on every task, what
// squeue says about jobs, and torchrun's MASTER_PORT of a job. No I/O: tested in
// batch_job_test.cc.
//
// What the batch script holds is det's only: the launcher's settings from master.yaml
// (checked by the config reader: no quotes or control characters) and the launch
// (a serialized v1::LaunchCommand, user values included) as base64, all single-quoted.
// No user text reaches a shell or an sbatch argument.
#ifndef DET_MASTER_SLURM_BATCH_JOB_H_
#define DET_MASTER_SLURM_BATCH_JOB_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/daemon_config.h"

namespace det::master::slurm {

// The environment variables through which the batch script hands the launcher its
// settings (the launcher reads them, and removes them from what the workers get).
inline constexpr char kMasterEnv[] = "DET_MASTER";
inline constexpr char kAgentIdEnv[] = "DET_SLURM_AGENT_ID";
inline constexpr char kSessionEnv[] = "DET_SLURM_SESSION";
inline constexpr char kWorkDirEnv[] = "DET_SLURM_WORK_DIR";
inline constexpr char kWorkerPythonEnv[] = "DET_SLURM_WORKER_PYTHON";
inline constexpr char kWorkerPathEnv[] = "DET_SLURM_WORKER_PATH";  // ':'-separated
inline constexpr char kSlotTypeEnv[] = "DET_SLURM_SLOT_TYPE";
inline constexpr char kChiefPortsEnv[] = "DET_SLURM_CHIEF_PORTS";  // "FIRST-LAST"
// The launch: DET_SLURM_LAUNCH_0 .. _{N-1} (base64 pieces, concatenated in order), N in
// DET_SLURM_LAUNCH_CHUNKS.
inline constexpr char kLaunchChunksEnv[] = "DET_SLURM_LAUNCH_CHUNKS";
inline constexpr char kLaunchChunkEnvPrefix[] = "DET_SLURM_LAUNCH_";
// The size of one piece: well under Linux's 128 KiB limit of one environment string.
inline constexpr size_t kLaunchChunkBytes = 64 * 1024;

// "det-<first 8 characters of cluster_id>-": every job of this master is named
// prefix + allocation id.
std::string JobNamePrefix(const std::string& cluster_id);
// The allocation id of the job named `job_name`, "" when it is not one of `prefix`'s.
std::string AllocationOfJob(const std::string& prefix, const std::string& job_name);

// How a run of `slots` slots is laid out: `nodes` nodes of `tasks_per_node` tasks (one
// rank each). Zero slots: one task. slots_per_node 0: all on one node; otherwise a node
// holds at most slots_per_node, and `slots` must be a multiple of it when it spans nodes
// (InvalidArgument naming slots_per_trial otherwise).
struct JobShape {
  int nodes = 1;
  int tasks_per_node = 1;
  int tasks() const { return nodes * tasks_per_node; }
};
absl::StatusOr<JobShape> ShapeOf(int slots, const config::SlurmConfig& config);

// What the launcher is told besides the launch.
struct LauncherSettings {
  std::string master_address;
  std::string agent_id;
  std::string session_id;
  std::string launcher;  // the det-slurm-launcher binary
};

struct BatchJob {
  // sbatch's arguments, before the script's path.
  std::vector<std::string> sbatch_args;
  // The batch script (sh).
  std::string script;
};
// The job running `launch` (a serialized v1::LaunchCommand) as `job_name` in `shape`.
// InvalidArgument when a setting cannot be written into the script safely.
absl::StatusOr<BatchJob> MakeBatchJob(const config::SlurmConfig& config, const JobShape& shape,
                                      const std::string& job_name,
                                      const LauncherSettings& settings,
                                      absl::string_view launch);

// One job as squeue lists it (squeue -h --states=all -o kSqueueFormat).
struct JobInfo {
  std::string id;
  std::string name;
  std::string state;   // PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, ...
  std::string reason;  // why it is pending ("Resources", "Priority", ...), else "None"
  std::string nodes;   // its node list once it runs ("n[1-2]")
};
inline constexpr char kSqueueFormat[] = "%i|%j|%T|%r|%N";
// The jobs of squeue's output in kSqueueFormat; malformed lines are skipped.
std::vector<JobInfo> ParseSqueue(absl::string_view out);

// One node as sinfo lists it (sinfo -h -N -o kSinfoFormat; a node in several partitions
// is listed once per partition, merged here).
struct NodeInfo {
  std::string name;
  std::string state;       // sinfo's long state: idle, mixed, allocated, down*, drained, ...
  int cpus = 0;
  int gpus = 0;            // from its gres ("gpu:a100:4(S:0-1)" -> 4)
  std::vector<std::string> partitions;  // without sinfo's "*" on the default one
};
inline constexpr char kSinfoFormat[] = "%N|%T|%c|%G|%P";
// The nodes of sinfo's output in kSinfoFormat, in its order; malformed lines are skipped.
std::vector<NodeInfo> ParseSinfo(absl::string_view out);
// The GPUs of a node's gres ("gpu:2", "gpu:a100:4(S:0-1),shard:8", "(null)" -> 0).
int GresGpus(absl::string_view gres);

// The job has ended: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED,
// OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, ... (not PENDING, CONFIGURING, REQUEUED, RESIZING or a
// Started state).
bool Ended(const std::string& state);
// The job's tasks have started (RUNNING, COMPLETING, SUSPENDED, STOPPED, SIGNALING).
bool Started(const std::string& state);

// torchrun's MASTER_PORT of job `job_id`: first + job_id % (last - first + 1).
int ChiefPort(int64_t job_id, int first, int last);

}  // namespace det::master::slurm

#endif  // DET_MASTER_SLURM_BATCH_JOB_H_
