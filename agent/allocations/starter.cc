#include "agent/allocations/starter.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/checkpoint_gc/checkpoint_gc.h"
#include "agent/supervisor/allocation_record.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"

namespace det::agent {

AllocationStarter::AllocationStarter(StarterConfig config, ProcessLauncher& launcher,
                                     MasterClient& client, Session& session, StopSignal& stop)
    : config_(std::move(config)),
      launcher_(launcher),
      client_(client),
      session_(session),
      stop_(stop),
      contexts_(config_.work_dir + "/contexts") {}

absl::Status AllocationStarter::Prepare(const v1::LaunchCommand& launch,
                                        const std::string& work_dir, const std::string& run_dir,
                                        LaunchContext& context, std::vector<std::string>& argv) {
  // The experiment owner's linked OS user, if any, replaces the default task user.
  absl::Status st = UseLaunchTaskUser(launch, geteuid(), getegid(), &context);
  // The experiment's interpreter (environment.python) wins over the agent's; without one, a
  // Python entrypoint needs the agent to have found an interpreter (with torch, for det's
  // torch launcher and Trial runner).
  if (!launch.python().empty()) {
    context.worker_python = launch.python();
  } else if (st.ok() && config_.python && !launch.has_checkpoint_gc()) {
    std::vector<std::string> entrypoint(launch.argv().begin(), launch.argv().end());
    bool needs_torch = EntrypointNeedsTorch(entrypoint);
    if ((IsPythonEntrypoint(entrypoint) && config_.python->path.empty()) ||
        (needs_torch && !config_.python->has_torch())) {
      st = absl::FailedPreconditionError(
          NoPythonMessage(config_.agent_id, *config_.python, needs_torch));
    }
  }
  v1::ModelContext model;
  if (st.ok() && launch.has_model_context()) {
    absl::StatusOr<v1::ModelContext> fetched = ModelContext(launch);
    if (fetched.ok()) model = *std::move(fetched);
    st = fetched.status();
  }
  if (st.ok()) st = WriteContext(work_dir, model.files());
  model.Clear();  // Written to disk; no need to keep it in memory.
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (st.ok() && ec) {
    st = absl::PermissionDeniedError(
        absl::StrCat("cannot create directory '", run_dir, "': ", ec.message()));
  }
  argv = WorkerArgv({launch.argv().begin(), launch.argv().end()}, context);
  if (st.ok() && launch.has_checkpoint_gc()) {
    // A checkpoint GC task: this binary deletes the checkpoints, supervised as a worker.
    std::string spec_file = work_dir + "/checkpoint-gc.json";
    st = WriteCheckpointGcSpec(spec_file, launch.checkpoint_gc());
    argv = CheckpointGcArgv(config_.shim_path, spec_file);
  }
  // The trial spec, hyperparameters and config go by file (they may exceed what one
  // environment string may hold).
  if (st.ok()) st = WriteLaunchFiles(work_dir, launch);
  // Last: the allocation's files become its task user's, readable by no other.
  if (st.ok()) st = HandOverWorkDir(work_dir, context.task_user);
  if (st.ok()) st = HandOverWorkDir(LaunchFilesDir(work_dir), context.task_user);
  return st;
}

AllocationStarter::Result AllocationStarter::Start(const v1::LaunchCommand& launch,
                                                   LaunchContext context) {
  const std::string& id = launch.allocation_id();
  const std::string work_dir = absl::StrCat(config_.work_dir, "/", SafeName(id));
  const std::string run_dir = absl::StrCat(config_.work_dir, "/run/", SafeName(id));
  // Leftovers of an allocation of the same id (an earlier cluster's) must not be mixed in.
  RemoveTree(run_dir);
  RemoveTree(work_dir);
  RemoveTree(LaunchFilesDir(work_dir));
  Result result;
  std::vector<std::string> argv;
  absl::Status st = Prepare(launch, work_dir, run_dir, context, argv);
  std::vector<Allocation::Worker> workers;
  EnvironmentVariables base = CurrentEnvironment();
  for (const auto& r : launch.ranks()) {
    Allocation::Worker& w = workers.emplace_back();
    w.rank = r;
    if (st.ok()) {
      WorkerSpec spec;
      spec.shim_path = config_.shim_path;
      spec.argv = argv;
      spec.env = WorkerEnvironment(launch, r, context, work_dir, base);
      spec.cwd = work_dir;
      spec.stdout_path = RankOutputPath(run_dir, r.rank(), 0);
      spec.stderr_path = RankOutputPath(run_dir, r.rank(), 1);
      spec.exit_path = RankExitPath(run_dir, r.rank());
      spec.run_as = context.task_user;
      if (spec.argv.empty()) {
        st = absl::InvalidArgumentError("the launch has an empty entrypoint");
      } else if (auto proc = launcher_.Start(spec); proc.ok()) {
        w.process = *std::move(proc);
        result.started.push_back(r.rank());
        Logger("agent")->info("allocation {}: rank {} started (shim pid {}): {}", id, r.rank(),
                              w.process->pid(), absl::StrJoin(spec.argv, " "));
      } else {
        st = proc.status();
      }
    }
    w.exited = !w.process;
  }
  result.allocation =
      std::make_shared<Allocation>(launch, work_dir, run_dir, std::move(workers),
                                   Allocation::Stopping{}, /*launched_reported=*/false);
  result.status = std::move(st);
  return result;
}

absl::StatusOr<v1::ModelContext> AllocationStarter::ModelContext(const v1::LaunchCommand& launch) {
  return contexts_.Get(launch.model_context(),
                       [&]() -> absl::StatusOr<v1::GetModelContextResponse> {
                         v1::GetModelContextRequest req;
                         req.set_agent_id(config_.agent_id);
                         req.set_allocation_id(launch.allocation_id());
                         absl::StatusOr<v1::GetModelContextResponse> resp;
                         for (int attempt = 1;; ++attempt) {
                           req.set_session_id(session_.id());
                           resp = client_.GetModelContext(req);
                           if (resp.ok() || !rpc::IsTransient(resp.status()) || attempt == 3 ||
                               stop_.SleepOrStop(absl::Seconds(1))) {
                             return resp;
                           }
                         }
                       });
}

}  // namespace det::agent
