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
//
// The Agent composes the parts, each with its own state and lock: Session (registration,
// heartbeat), CommandPoller (the master's commands), Outbox (lines and reports, in order,
// retried), AllocationTable (the allocations and their records), AllocationStarter (launch),
// Supervision (one per worker), MetricsBuffer (host metrics).
#ifndef DET_AGENT_AGENT_H_
#define DET_AGENT_AGENT_H_

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/allocations/allocation_table.h"
#include "agent/allocations/starter.h"
#include "agent/launcher/launcher.h"
#include "agent/master_client/master_client.h"
#include "agent/outbox/outbox.h"
#include "agent/poller/command_poller.h"
#include "agent/python/python_finder.h"
#include "agent/session/session.h"
#include "agent/stop_signal.h"
#include "agent/supervisor/process_launcher.h"
#include "agent/supervisor/worker_process.h"
#include "agent/sysmetrics/metrics_buffer.h"
#include "agent/sysmetrics/system_sampler.h"
#include "common/clock/clock.h"
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
  // Time for every deadline, timer and timestamp of the agent. Null: the real clock. Not
  // owned; must outlive the agent.
  Clock* clock = nullptr;
  // Starts and adopts the workers. Null: the shim (ShimProcessLauncher). Not owned; must
  // outlive the agent.
  ProcessLauncher* launcher = nullptr;
  // The longest an agent thread waits (real time) before it reads the clock again, so that
  // a FakeClock moved by a test ends its waits. Default: 1 s.
  absl::Duration max_real_wait = absl::Seconds(1);
};

// Threads: Run() is the session loop (register, heartbeat); one poller thread; one outbox
// thread; one metrics thread; one supervisor thread per worker process.
class Agent : private CommandHandler {
 public:
  // `client` must outlive the agent. `slots` are the slots this machine offers.
  Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots,
        AgentOptions options);
  ~Agent() override;

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
  // CommandHandler, on the poller's thread.
  void Launch(const v1::LaunchCommand& launch) override;
  void Kill(const std::string& allocation_id, const std::string& reason,
            absl::Duration grace) override;

  // `grace` zero: config kill_grace.
  void StopAllocation(const std::string& allocation_id, const std::string& reason,
                      absl::Duration grace = absl::ZeroDuration(), bool agent_stopping = false);
  // Registers and heartbeats until Stop() or Detach(); the master's refusal, if it stopped
  // the agent.
  absl::Status SessionLoop();
  // Stops every worker and lets the outbox report their exits (for a while).
  void Shutdown();
  // Finds the allocations of a previous agent process in work_dir and watches them.
  void Restore();
  void OutboxLoop();
  void MetricsLoop();
  void StartSupervisors(Allocation& allocation);
  void ReportLaunched(const std::string& allocation_id, const std::vector<int>& ranks);
  // Joins and forgets allocations whose workers have all exited and whose exits the master
  // accepted (or not, when `even_if_unreported`), deleting their directories.
  void ReapFinished(bool even_if_unreported);
  // Stops the helper threads (not the workers' supervisors) and the client.
  void StopThreads();

  const config::AgentConfig config_;
  MasterClient& client_;
  const AgentOptions options_;
  RealClock real_clock_;
  ShimProcessLauncher shim_launcher_;
  Clock& clock_;
  ProcessLauncher& launcher_;
  // What every launch starts from (the session adds the advertised address).
  const LaunchContext launch_context_;

  StopSignal stop_;
  Session session_;
  MetricsBuffer metrics_;
  Outbox outbox_;
  AllocationTable allocations_;
  AllocationStarter starter_;
  CommandPoller poller_;

  std::thread poller_thread_;
  std::thread outbox_thread_;
  std::thread metrics_thread_;
};

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_H_
