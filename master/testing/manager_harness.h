// The master's managers, built by the master's own builder (master/server/managers.h,
// so the two cannot drift; without gRPC, HTTP or users), on an EventLoop driven by a FakeClock over a store the test owns: manager tests
// with no sockets and no sleeps. Each step is one turn on the loop (the call, then the end
// of the turn: the scheduling pass it asked for, the events it recorded). A second harness
// on the same store is a restarted master.
#ifndef DET_MASTER_TESTING_MANAGER_HARNESS_H_
#define DET_MASTER_TESTING_MANAGER_HARNESS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/event_loop/event_loop.h"
#include "master/loop/turns.h"
#include "master/server/managers.h"
#include "master/store/store.h"

namespace det::master::testing {

class ManagerHarness {
 public:
  // `store` and `clock` must outlive the harness. Start() restores and starts the loop.
  // What differs from the master's managers is in `options` (e.g. a fake Slurm client).
  ManagerHarness(config::MasterConfig config, Store& store, FakeClock& clock,
                 ManagerOptions options = {});
  ~ManagerHarness();

  // Rebuilds the managers from the store and runs the first turn (as Master::Create).
  absl::Status Start();

  // Runs `fn` on the loop as one turn.
  void Turn(const std::function<void()>& fn);
  // Moves the clock on by `d`; the timers then due run, each as a turn.
  void Advance(absl::Duration d);

  // A single-searcher experiment named `name` (ExperimentYaml); returns its first trial.
  int64_t CreateExperiment(const std::string& name, int slots = 1);
  // ExperimentManager::Create as one turn.
  absl::Status Create(const v1::CreateExperimentRequest& req, v1::CreateExperimentResponse* resp);
  // ReportMetrics from rank `rank` of `launch`'s allocation; returns once the rows are
  // stored (the group commit's turn ran) or refused.
  absl::Status ReportMetrics(const v1::LaunchCommand& launch, const std::vector<v1::Metrics>& rows,
                             int rank = 0);
  // Agent `id`'s credential in every harness: 64 hex digits made from the id.
  static std::string AgentCredential(const std::string& id);
  // Registers agent `id` still running `running`, with AgentCredential(id) (which its
  // first registration enrolls it with, and which every later harness over the same store
  // presents again); returns its session.
  std::string Register(const std::string& id, int slots,
                       const std::vector<std::string>& running = {},
                       v1::RegisterResponse* resp = nullptr);
  // The commands queued for agent `id` (session `session`), taken.
  std::vector<v1::AgentCommand> Commands(const std::string& id, const std::string& session);
  // The next launch queued for `id`, or an empty one (and a test failure).
  v1::LaunchCommand NextLaunch(const std::string& id, const std::string& session);
  absl::Status ReportExit(const std::string& agent, const std::string& session,
                          const std::string& allocation, int exit_code);
  absl::Status ReportCheckpoint(const v1::LaunchCommand& launch, const std::string& uuid,
                                int64_t batches);
  // The trial as readers see it; its stored log lines (events) joined by newlines.
  v1::Trial Trial(int64_t id);
  std::string Logs(int64_t trial);
  // ListTasks' checkpoint GC rows.
  std::vector<v1::Task> GcTasks();

  config::MasterConfig config;
  FakeClock& clock;
  Store& store;
  EventLoop loop;
  Turns turns;
  Managers managers;
  // managers' members, by their names in tests.
  AgentManager& agents = managers.agents;
  Templates& templates = managers.templates;
  ExperimentRegistry& registry = managers.registry;
  LogManager& logs = managers.logs;
  CheckpointManager& checkpoints = managers.checkpoints;
  ExperimentManager& experiments = managers.experiments;
  AllocationManager& allocations = managers.allocations;
  SchedulingService& scheduling = managers.scheduling;
  MetricsManager& metrics = managers.metrics;
  AgentLiveness& liveness = managers.liveness;
  ModelRegistry& models = managers.models;
  StoreReads& reads = managers.reads;
};

}  // namespace det::master::testing

#endif  // DET_MASTER_TESTING_MANAGER_HARNESS_H_
