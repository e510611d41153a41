// What a worker process is started with: its environment (rank, world size, seed, ...) and
// its working directory holding the experiment's model context. Pure functions plus file
// writes; no processes are started here.
#ifndef DET_AGENT_LAUNCHER_LAUNCHER_H_
#define DET_AGENT_LAUNCHER_LAUNCHER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/process/subprocess.h"
#include "proto/agent.pb.h"

namespace det::agent {

struct LaunchContext {
  std::string agent_id;
  std::string master_address;
  // "cpu" or "cuda".
  std::string slot_type = "cpu";
  // Directories put before PATH to find entrypoints.
  std::vector<std::string> worker_path;
  // The interpreter that runs entrypoints whose argv[0] is `python3` or `python` (see
  // WorkerArgv); also DET_PYTHON. Empty: such entrypoints are searched in PATH as given.
  std::string worker_python;
  // Directories put on PYTHONPATH after the allocation's context directory.
  std::vector<std::string> python_path;
  // The CPUs this agent may use (OMP_NUM_THREADS is shared out of them). >= 1.
  int cpu_count = 1;
  // Where other agents reach this one (what it advertised to the master) and the local
  // network interface holding that address; either may be empty (unknown).
  std::string advertise_address;
  std::string network_interface;
  // The OS user the allocation's workers run as and own its work dir (see HandOverWorkDir);
  // unset: the agent's own user. The agent fills in its configured task user; a launch
  // for a det user linked to an OS user may set another one per allocation.
  std::optional<RunAs> task_user;
  // Its name (USER and LOGNAME of the workers), when known.
  std::string task_user_name;
};

// The complete environment of the worker running `rank` of `launch` in `work_dir` (its
// working directory, holding the model context): `base` (the agent's own environment, less
// DET_CLUSTER_SECRET, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID and DET_PYTHON), then
// the launch's variables (DET_* and the experiment's
// environment_variables), then the variables below, which win over both unless noted.
//
// det's own:
//   DET_MASTER, DET_AGENT_ID, DET_SLOT_IDS (comma-separated), DET_SLOT_TYPE,
//   CUDA_VISIBLE_DEVICES (the rank's slots on a "cuda" agent, "" on a "cpu" one),
//   PATH (worker_path, then base's PATH; a default when neither has one),
//   PWD = work_dir,
//   DET_PYTHON = worker_python (when set),
//   PYTHONPATH = work_dir, then python_path, then the launch's PYTHONPATH or else base's,
//   HOME = work_dir, USER = LOGNAME = ctx.task_user_name: only with a ctx.task_user (the
//     agent's home is not the worker's), the names only when known.
// Values too large for the environment (kLaunchFileVariables) travel as files:
//   NAME_FILE = LaunchFilesDir(work_dir)/NAME for each NAME of kLaunchFileVariables in the
//     launch's variables (written there by WriteLaunchFiles); NAME itself is not set.
// torchrun's launch contract (what `torchrun` gives each worker, so that
// `init_process_group(init_method="env://")` works unchanged):
//   RANK, WORLD_SIZE            the rank and the number of ranks of the allocation
//   LOCAL_RANK                  the rank's index among the ranks on its agent
//   LOCAL_WORLD_SIZE            the number of ranks of `launch` on this agent
//   GROUP_RANK, CROSS_RANK      launch.agent_rank: this agent's index in the allocation
//   GROUP_WORLD_SIZE, CROSS_SIZE  launch.num_agents
//   ROLE_RANK, ROLE_WORLD_SIZE  = RANK, WORLD_SIZE;  ROLE_NAME = "default"
//   MASTER_ADDR                 launch.chief_address: where every rank reaches rank 0's
//                               agent; only when non-empty
//   MASTER_PORT                 launch.chief_port, reserved for this allocation on the
//                               chief's agent; only when > 0
//   TORCHELASTIC_RESTART_COUNT  launch.restart_count (the trial's restarts so far)
//   TORCHELASTIC_MAX_RESTARTS   launch.max_restarts
//   TORCHELASTIC_RUN_ID         launch.run_id, stable across restarts; only when non-empty
//   OMP_NUM_THREADS             max(1, cpu_count / LOCAL_WORLD_SIZE), unless the launch's
//                               variables set it (then theirs)
// Where the ranks of a launch that spans agents (num_agents > 1) listen for each other,
// each set only when known and neither the launch's variables nor `base` set it:
//   DET_COLLECTIVE_HOST         ctx.advertise_address (det's Gloo collective listens there)
//   GLOO_SOCKET_IFNAME,         ctx.network_interface (PyTorch's Gloo and NCCL's sockets
//   NCCL_SOCKET_IFNAME          use it instead of guessing from the host name)
EnvironmentVariables WorkerEnvironment(const v1::LaunchCommand& launch,
                                       const v1::RankPlacement& rank, const LaunchContext& ctx,
                                       const std::string& work_dir,
                                       const EnvironmentVariables& base);

// The launch variables whose values can outgrow Linux's 128 KiB limit on one environment
// string (the trial spec, hyperparameters and experiment config: a config may be up to
// 1 MiB). Workers get each as a file, named by NAME_FILE (see WorkerEnvironment).
inline constexpr const char* kLaunchFileVariables[] = {"DET_TRIAL_SPEC", "DET_HPARAMS",
                                                       "DET_EXPERIMENT_CONFIG"};

// Where the launch files of the allocation whose work dir is `allocation_work_dir`
// (<agent work_dir>/<SafeName(id)>) live: <agent work_dir>/launch/<SafeName(id)>, beside the
// model context rather than in it, so that no context file can collide with them.
std::string LaunchFilesDir(const std::string& allocation_work_dir);

// Writes each of kLaunchFileVariables that `launch` sets into LaunchFilesDir(
// allocation_work_dir)/NAME (the directory created mode 0700, files 0600; hand it to the
// task user with HandOverWorkDir). The files' parent, <agent work_dir>/launch, must exist
// (PrepareWorkRoot).
absl::Status WriteLaunchFiles(const std::string& allocation_work_dir,
                              const v1::LaunchCommand& launch);

// The program and arguments a worker runs for `entrypoint`: as given, except that argv[0]
// `python3` or `python` (exactly those names) becomes ctx.worker_python when it is set, so
// that Python entrypoints get the agent's interpreter whatever PATH holds. No shell.
std::vector<std::string> WorkerArgv(const std::vector<std::string>& entrypoint,
                                    const LaunchContext& ctx);

// The agent's default python_path: {<directory of `agent_binary`>/../python} (normalized)
// when that directory exists, else none.
std::vector<std::string> DefaultPythonPath(const std::string& agent_binary);

// The CPUs this process may run on (its affinity mask; the online CPUs if that fails); >= 1.
int UsableCpuCount();

// Writes the context files under `dir` (created). Paths must be relative and stay inside
// `dir`; anything else is InvalidArgument naming the path.
absl::Status WriteContext(const std::string& dir,
                          const google::protobuf::RepeatedPtrField<v1::ContextFile>& files);

// Writes `data` to `path` (not following a link there) mode 0600, through a temporary
// file renamed over it: a reader sees the old file or the whole new one.
absl::Status WritePrivateFile(const std::string& path, absl::string_view data);

// Makes the agent's work_dir ready to hold allocations: `work_dir` (created) and
// `work_dir`/launch (launch files) mode 0711, so that a task user can reach its own
// allocation's directories by path but list nothing, and `work_dir`/run (records, exit
// files, worker output) mode 0700.
absl::Status PrepareWorkRoot(const std::string& work_dir);

// Gives an allocation's work dir (written by the agent) to its workers: `dir` becomes mode
// 0700 and, with a `user`, it and everything in it are chowned to that user (links
// themselves, never followed).
absl::Status HandOverWorkDir(const std::string& dir, const std::optional<RunAs>& user);

// Sets ctx's task user to launch.task_user, the OS user linked to the experiment's owner,
// when the launch names one (else leaves ctx's default alone), for an agent running as
// `agent_uid`:`agent_gid`. Refused, naming the user: uid or gid 0 (PermissionDenied),
// ids out of range (InvalidArgument), and, on an agent that is not root and is not that
// user already, any switch (FailedPrecondition): the workers never run as the agent's
// user in its place. An agent that is that user runs them as itself.
absl::Status UseLaunchTaskUser(const v1::LaunchCommand& launch, uid_t agent_uid,
                               gid_t agent_gid, LaunchContext* ctx);

// Whether `user` can reach (search) `path`, checked in a child process that switches to
// it. OK without a `user`; PermissionDenied naming the user and path otherwise.
absl::Status CheckUserCanReach(const std::string& path, const std::optional<RunAs>& user);

// A directory name for an allocation id (only [A-Za-z0-9._-]).
std::string SafeName(const std::string& id);

}  // namespace det::agent

#endif  // DET_AGENT_LAUNCHER_LAUNCHER_H_
