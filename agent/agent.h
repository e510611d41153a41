// The agent daemon: joins the master, keeps its session alive, runs the worker processes of
// the allocations the master hands it, ships their output, reports their exits.
#ifndef DET_AGENT_AGENT_H_
#define DET_AGENT_AGENT_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/launcher/launcher.h"
#include "agent/master_client/master_client.h"
#include "common/config/daemon_config.h"
#include "common/process/subprocess.h"
#include "proto/agent.pb.h"

namespace det::agent {

// Threads: Run() is the session loop (register, heartbeat); one poller thread; one outbox
// thread (logs and reports, in order, retried until the master takes them); one supervisor
// thread per worker process. Shared state is under mu_.
class Agent {
 public:
  // `client` must outlive the agent. `slots` are the slots this machine offers.
  Agent(config::AgentConfig config, MasterClient& client, std::vector<v1::Slot> slots);
  ~Agent();

  // Blocks until Stop(). Workers are stopped (SIGTERM, then SIGKILL after kill_grace) and
  // their exits reported, best effort, before it returns.
  void Run();
  // Thread-safe.
  void Stop();

 private:
  struct Worker {
    v1::RankPlacement rank;
    std::unique_ptr<Subprocess> process;
    std::thread supervisor;
    bool exited = false;
  };
  struct Allocation {
    v1::LaunchCommand launch;
    std::vector<std::unique_ptr<Worker>> workers;
    absl::Time kill_deadline = absl::InfiniteFuture();
    bool killing = false;
    int reported_exits = 0;
  };
  // One entry of the outbox: a log line, or a report.
  struct Outgoing {
    std::optional<v1::LogLine> line;
    std::optional<v1::ReportLaunchedRequest> launched;
    std::optional<v1::ReportExitRequest> exit;
  };

  bool RegisterOnce();
  void PollLoop();
  void OutboxLoop();
  void Launch(const v1::LaunchCommand& launch);
  void Kill(const std::string& allocation_id, const std::string& reason);
  void Supervise(Allocation* allocation, Worker* worker);
  void Enqueue(Outgoing item);
  void AgentLine(const v1::LaunchCommand& launch, int rank, const std::string& message);
  // Joins and forgets allocations whose workers have all exited and whose reports were
  // delivered (or not, when `even_if_unreported`).
  void ReapFinished(bool even_if_unreported);
  // Sleeps up to `d`, returning early (true) when stopping.
  bool SleepOrStop(absl::Duration d);
  std::string Session();
  void SessionLost(const std::string& stale_session);

  config::AgentConfig config_;
  MasterClient& client_;
  std::vector<v1::Slot> slots_;
  LaunchContext launch_context_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string session_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Allocation>> allocations_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  int64_t outbox_lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);

  std::thread poller_;
  std::thread outbox_thread_;
};

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_H_
