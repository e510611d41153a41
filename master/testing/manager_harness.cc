#include "master/testing/manager_harness.h"

#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "gtest/gtest.h"
#include "master/testing/master_testing.h"

namespace det::master::testing {

ManagerHarness::ManagerHarness(config::MasterConfig config_in, Store& store_in,
                               FakeClock& clock_in, ManagerOptions options)
    : config(std::move(config_in)),
      clock(clock_in),
      store(store_in),
      loop(clock),
      turns(loop),
      managers(config, clock, store, loop, turns, std::move(options)) {}

ManagerHarness::~ManagerHarness() {
  loop.RunSync([this] { managers.FailWaiters(absl::UnavailableError("test ends")); });
  loop.RunSync([] {});
  loop.Stop();
}

absl::Status ManagerHarness::Start() {
  loop.Start();
  absl::Status st;
  Turn([&] {
    absl::StatusOr<StoreSnapshot> snap = store.Load();
    st = snap.ok() ? managers.Restore(*std::move(snap)) : snap.status();
    if (!st.ok()) return;
    liveness.CheckAgents();
    turns.RequestSchedule();
  });
  return st;
}

void ManagerHarness::Turn(const std::function<void()>& fn) {
  loop.RunSync([&] {
    fn();
    turns.EndTurn();
  });
}

void ManagerHarness::Advance(absl::Duration d) {
  clock.Advance(d);
  loop.Wake();
  Turn([] {});
}

int64_t ManagerHarness::CreateExperiment(const std::string& name, int slots) {
  v1::CreateExperimentRequest req;
  req.set_config_yaml(ExperimentYaml(name, slots));
  v1::CreateExperimentResponse resp;
  absl::Status st;
  int64_t trial = 0;
  Turn([&] {
    st = experiments.Create("", req, &resp);
    if (st.ok()) trial = registry.experiments.at(resp.experiment().id()).trial_ids.at(0);
  });
  EXPECT_TRUE(st.ok()) << st;
  return trial;
}

absl::Status ManagerHarness::Create(const v1::CreateExperimentRequest& req,
                                    v1::CreateExperimentResponse* resp) {
  absl::Status st;
  Turn([&] { st = experiments.Create("", req, resp); });
  return st;
}

absl::Status ManagerHarness::ReportMetrics(const v1::LaunchCommand& launch,
                                           const std::vector<v1::Metrics>& rows, int rank) {
  v1::ReportMetricsRequest req;
  req.mutable_auth()->set_allocation_id(launch.allocation_id());
  auto token = launch.env().find("DET_ALLOCATION_TOKEN");
  if (token != launch.env().end()) req.mutable_auth()->set_token(token->second);
  req.mutable_auth()->set_rank(rank);
  req.set_trial_id(launch.trial_id());
  for (const auto& r : rows) *req.add_metrics() = r;
  std::optional<absl::Status> acked;
  Turn([&] { metrics.Report(req, [&](absl::Status st) { acked = st; }); });
  loop.RunSync([] {});  // The group commit was posted before this.
  if (!acked) return absl::InternalError("ReportMetrics was not acknowledged");
  return *acked;
}

std::string ManagerHarness::AgentCredential(const std::string& id) {
  std::string hex = absl::BytesToHexString(id);
  hex.resize(64, '0');
  return hex;
}

std::string ManagerHarness::Register(const std::string& id, int slots,
                                     const std::vector<std::string>& running,
                                     v1::RegisterResponse* resp) {
  v1::RegisterResponse own;
  if (resp == nullptr) resp = &own;
  absl::Status st;
  v1::RegisterRequest req = RegisterRequest(id, slots, running);
  // As a real agent keeps it in its work_dir: a known id needs its credential.
  req.set_agent_credential(AgentCredential(id));
  Turn([&] { st = liveness.Register(req, resp); });
  EXPECT_TRUE(st.ok()) << st;
  return resp->session_id();
}

std::vector<v1::AgentCommand> ManagerHarness::Commands(const std::string& id,
                                                       const std::string& session) {
  std::vector<v1::AgentCommand> out;
  absl::Status st;
  Turn([&] {
    agents.Poll(id, session, absl::ZeroDuration(),
                [&](absl::Status s, std::vector<v1::AgentCommand> cmds) {
                  st = s;
                  out = std::move(cmds);
                });
  });
  loop.RunSync([] {});  // An empty poll's zero wait ends before this.
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

v1::LaunchCommand ManagerHarness::NextLaunch(const std::string& id, const std::string& session) {
  for (const auto& c : Commands(id, session)) {
    if (c.has_launch()) return c.launch();
  }
  ADD_FAILURE() << "no launch for agent " << id;
  return {};
}

absl::Status ManagerHarness::ReportExit(const std::string& agent, const std::string& session,
                                        const std::string& allocation, int exit_code) {
  v1::ReportExitRequest req;
  req.set_agent_id(agent);
  req.set_session_id(session);
  req.set_allocation_id(allocation);
  req.set_rank(0);
  req.set_exit_code(exit_code);
  absl::Status st;
  Turn([&] {
    st = agents.Touch(agent, session);
    if (!st.ok()) return;
    const std::string how = absl::StrCat("exit code ", exit_code);
    if (!checkpoints.OnExit(req, how, exit_code != 0)) allocations.OnExit(req, how, exit_code != 0);
  });
  return st;
}

absl::Status ManagerHarness::ReportCheckpoint(const v1::LaunchCommand& launch,
                                              const std::string& uuid, int64_t batches) {
  v1::ReportCheckpointRequest req;
  req.mutable_auth()->set_allocation_id(launch.allocation_id());
  req.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  req.mutable_checkpoint()->set_uuid(uuid);
  req.mutable_checkpoint()->set_total_batches(batches);
  req.mutable_checkpoint()->set_storage_path("/ckpt/" + uuid);
  absl::Status st;
  Turn([&] { st = checkpoints.ReportCheckpoint(req); });
  return st;
}

v1::Trial ManagerHarness::Trial(int64_t id) {
  v1::Trial t;
  loop.RunSync([&] { t = registry.TrialView(registry.trials.at(id)); });
  return t;
}

std::string ManagerHarness::Logs(int64_t trial) {
  std::string out;
  loop.RunSync([&] {
    auto lines = store.GetLogs(trial, 0, 5000, std::nullopt);
    if (!lines.ok()) return;
    for (const auto& l : *lines) out += l.message() + "\n";
  });
  return out;
}

std::vector<v1::Task> ManagerHarness::GcTasks() {
  v1::ListTasksResponse resp;
  loop.RunSync([&] { checkpoints.AddTaskViews(&resp); });
  return {resp.tasks().begin(), resp.tasks().end()};
}

}  // namespace det::master::testing
