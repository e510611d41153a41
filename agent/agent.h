// The agent daemon: joins the master, keeps its session alive, runs the worker processes of
// the allocations the master hands it, ships their output, reports their exits and sends
// host metrics.
//
// Workers outlive the agent process: each runs under a shim (supervisor/shim.h) in its own
// process group, writing its output to files under WORK_DIR/run/ALLOCATION, where the agent
// also keeps a record of the allocation (supervisor/allocation_record.h). A new agent
// process on the same work_dir re-adopts the workers it finds there, resumes shipping their
// output where the master's acknowledgements left off, and reports their exits; the master
// reattaches them when the agent registers again within agent_reconnect_wait.
#ifndef DET_AGENT_AGENT_H_
#define DET_AGENT_AGENT_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "agent/context_cache.h"
#include "agent/launcher/launcher.h"
#include "agent/master_client/master_client.h"
#include "agent/python/python_finder.h"
#include "agent/supervisor/allocation_record.h"
#include "agent/supervisor/worker_process.h"
#include "agent/sysmetrics/system_sampler.h"
#include "common/config/daemon_config.h"
#include "proto/agent.pb.h"

namespace det::agent {

struct AgentOptions {
  // The det-agent binary, run as each worker's shim (`det-agent --worker-shim ...`).
  std::string shim_path;
  // How often host metrics are sampled and sent. Zero: never. Default: 5 s.
  absl::Duration system_metrics_period = absl::Seconds(5);
  // Takes the samples; null: none are sent. Not owned; must outlive the agent.
  SystemSampler* sampler = nullptr;
  // The OS user every worker runs as and whose its allocation's work dir is (mode 0700);
  // unset: the agent's own user. Needs an agent running as root. See LaunchContext.
  std::optional<RunAs> task_user;
  std::string task_user_name;
  // The interpreter chosen for Python entrypoints (python/python_finder.h: worker_python
  // or the one found that can import torch), reported to the master; a launch whose
  // entrypoint needs an interpreter (or torch) this agent lacks fails at once, naming what
  // was tried. Unset: config.worker_python as is, nothing checked (tests).
  std::optional<PythonChoice> python;
};

// Threads: Run() is the session loop (register, heartbeat); one poller thread; one outbox
// thread (logs and reports, in order, retried until the master takes them); one metrics
// thread; one supervisor thread per worker process. Shared state is under mu_.
class Agent {
 public:
  // `client` must outlive the agent. `slots` are the slots this machine offers.
  Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
        AgentOptions options);
  ~Agent();

  // Re-adopts the workers a previous agent process left in work_dir, then serves until
  // Stop() or Detach(). After Stop(), workers have been stopped (SIGTERM, then SIGKILL after
  // the grace period) and their exits reported, best effort. After Detach(), workers keep
  // running for the next agent process. Returns an error at once when the master refuses
  // the agent (wrong cluster secret) and no worker of a previous agent process runs.
  absl::Status Run();
  // Thread-safe.
  void Stop();
  // Thread-safe. Leave the workers running (for an upgrade or restart of the agent).
  void Detach();

 private:
  struct Worker {
    v1::RankPlacement rank;
    // Null when the rank never started.
    std::unique_ptr<WorkerProcess> process;
    std::thread supervisor;
    bool exited = false;
    // The master accepted its exit report.
    bool exit_reported = false;
    // Bytes of stdout (0) and stderr (1) the master accepted.
    int64_t shipped[2] = {0, 0};
  };
  struct Allocation {
    v1::LaunchCommand launch;
    std::string work_dir;  // the workers' working directory (model context)
    std::string run_dir;   // output, exit files, record
    std::vector<std::unique_ptr<Worker>> workers;
    absl::Time kill_deadline = absl::InfiniteFuture();
    bool killing = false;
    bool agent_stopping = false;
    bool launched_reported = false;
  };
  // One entry of the outbox: a log line, or a report.
  struct Outgoing {
    std::optional<v1::LogLine> line;
    std::optional<v1::ReportLaunchedRequest> launched;
    std::optional<v1::ReportExitRequest> exit;
    // For a worker's output line: its stream (0 stdout, 1 stderr) and the file offset just
    // after it; -1 for lines the agent writes itself.
    int stream = -1;
    int64_t end_offset = 0;
  };

  // Finds the allocations of a previous agent process in work_dir/run and watches them.
  void Restore();
  absl::Status RegisterOnce();
  void PollLoop();
  void OutboxLoop();
  void MetricsLoop();
  void Launch(const v1::LaunchCommand& launch);
  // The model context of `launch` (ContextCache; GetModelContext, retried while the master
  // is unreachable, up to 3 tries). Poll thread only.
  absl::StatusOr<v1::ModelContext> ModelContext(const v1::LaunchCommand& launch);
  // `grace` zero: config kill_grace.
  void Kill(const std::string& allocation_id, const std::string& reason,
            absl::Duration grace = absl::ZeroDuration(), bool agent_stopping = false);
  void StartSupervisor(Allocation* allocation, Worker* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Supervise(Allocation* allocation, Worker* worker);
  void Enqueue(Outgoing item);
  void AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message);
  // Records delivered outbox items in their allocations' records.
  void Delivered(const std::vector<Outgoing>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the allocation's record (the agent's memory of it across restarts).
  void Persist(const Allocation& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins and forgets allocations whose workers have all exited and whose exits the master
  // accepted (or not, when `even_if_unreported`), deleting their directories.
  void ReapFinished(bool even_if_unreported);
  // Sleeps up to `d`, returning early (true) when stopping.
  bool SleepOrStop(absl::Duration d);
  std::string Session();
  void SessionLost(const std::string& stale_session);
  // Stops the helper threads (not the workers' supervisors) and the client.
  void StopThreads();

  config::AgentConfig config_;
  MasterClient& client_;
  std::vector<v1::Slot> slots_;
  AgentOptions options_;
  // Fixed at construction, except advertise_address and network_interface: written under
  // mu_ at each registration; Launch() copies the whole under mu_.
  LaunchContext launch_context_;
  // work_dir/contexts; used by the poll thread only.
  ContextCache contexts_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  std::string session_ ABSL_GUARDED_BY(mu_);
  // The credential the master issued to this agent id (work_dir/run/agent_credential).
  std::string credential_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Allocation>> allocations_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  int64_t outbox_lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  // Samples not yet accepted by the master, oldest first (bounded).
  std::deque<v1::SystemMetrics> metrics_ ABSL_GUARDED_BY(mu_);

  std::thread poller_;
  std::thread outbox_thread_;
  std::thread metrics_thread_;
};

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_H_
