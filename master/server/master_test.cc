// The master through its handler interfaces (the test plays the agents and the workers),
// on a FakeClock, with a real SQLite file in a temp dir; one case also goes through the
// real gRPC WorkerService on loopback.
#include "master/server/master.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/in_memory_store.h"
#include "master/store/testing/postgres_server.h"
#include "master/testing/master_testing.h"
#include "proto/worker.grpc.pb.h"

namespace det::master {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using testing::ExperimentYaml;
using testing::Pending;
using testing::Sync;

template <typename Req, typename Resp>
absl::Status Api(ApiHandler* m, void (ApiHandler::*method)(const Caller&, const Req&, Resp*, Done),
                 const Req& req, Resp* resp) {
  Pending p;
  Caller caller;
  (m->*method)(caller, req, resp, p.Callback());
  p.Wait(absl::Seconds(30));
  return p.status;
}

class MasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("master_");
    config_ = testing::LoopbackMasterConfig(dir_);
    StartMaster();
  }
  void TearDown() override {
    if (master_) master_->Shutdown();
  }
  void StartMaster() {
    auto m = Master::Start(config_, clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
  }
  void RestartMaster() {
    master_->Shutdown();
    master_.reset();
    StartMaster();
  }

  std::string RegisterAgent(const std::string& id, int slots,
                            const std::vector<std::string>& running = {},
                            const std::string& advertise = "", int first = 0, int last = 0) {
    v1::RegisterRequest req = testing::RegisterRequest(id, slots, running);
    req.set_advertise_address(advertise);
    req.set_chief_port_first(first);
    req.set_chief_port_last(last);
    // As a real agent keeps it in its work_dir: a known id needs its credential.
    req.set_agent_credential(credentials_[id]);
    v1::RegisterResponse resp;
    absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::Register, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    credentials_[id] = resp.agent_credential();
    return resp.session_id();
  }
  std::map<std::string, std::string> credentials_;  // agent id -> its agent credential

  int64_t CreateExperiment(const std::string& name, int slots = 1) {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(ExperimentYaml(name, slots));
    v1::CreateExperimentResponse resp;
    absl::Status st = Api(&master_->service(), &ApiHandler::CreateExperiment, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.experiment().id();
  }

  // The launch commands agent `id` has been sent (waits for at least one).
  std::vector<v1::LaunchCommand> Launches(const std::string& id, const std::string& session) {
    v1::PollCommandsRequest req;
    req.set_agent_id(id);
    req.set_session_id(session);
    req.set_wait_ms(20000);
    v1::PollCommandsResponse resp;
    absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::PollCommands, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    std::vector<v1::LaunchCommand> out;
    for (const auto& c : resp.commands()) {
      if (c.has_launch()) out.push_back(c.launch());
    }
    return out;
  }
  v1::LaunchCommand NextLaunch(const std::string& id, const std::string& session) {
    auto all = Launches(id, session);
    if (all.empty()) {
      ADD_FAILURE() << "no launch for agent " << id;
      return {};
    }
    return all.front();
  }

  absl::Status ReportExit(const std::string& agent, const std::string& session,
                          const std::string& alloc, int exit_code) {
    v1::ReportExitRequest req;
    req.set_agent_id(agent);
    req.set_session_id(session);
    req.set_allocation_id(alloc);
    req.set_rank(0);
    req.set_exit_code(exit_code);
    v1::ReportExitResponse resp;
    return Sync<AgentHandler>(&master_->service(), &AgentHandler::ReportExit, req, &resp);
  }

  static v1::WorkerAuth Auth(const v1::LaunchCommand& launch) {
    v1::WorkerAuth auth;
    auth.set_allocation_id(launch.allocation_id());
    auth.set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
    return auth;
  }

  v1::Trial GetTrial(int64_t id) {
    v1::GetTrialRequest req;
    req.set_id(id);
    v1::GetTrialResponse resp;
    absl::Status st = Api(&master_->service(), &ApiHandler::GetTrial, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp.trial();
  }

  std::string TrialLogs(int64_t trial) {
    v1::GetTrialLogsRequest req;
    req.set_trial_id(trial);
    req.set_limit(5000);
    v1::GetTrialLogsResponse resp;
    EXPECT_TRUE(Api(&master_->service(), &ApiHandler::GetTrialLogs, req, &resp).ok());
    std::string out;
    for (const auto& l : resp.lines()) out += l.message() + "\n";
    return out;
  }

  // Waits (bounded, real time) until the logs of `trial` contain `text`.
  ::testing::AssertionResult LogsEventually(int64_t trial, const std::string& text) {
    return ::det::testing::WaitUntil(
        absl::StrCat("trial ", trial, "'s logs to contain \"", text, "\""),
        [&] { return TrialLogs(trial).find(text) != std::string::npos; }, absl::Seconds(20));
  }

  FakeClock clock_;
  config::MasterConfig config_;
  std::string dir_;
  std::unique_ptr<Master> master_;
};

// Every agent of an allocation is told torchrun's contract: the chief's advertised
// address, a port of its chief_port_range held by this allocation only (until it ends,
// across a master restart), the restarts so far, max_restarts and a stable run id.
TEST_F(MasterTest, LaunchesCarryTheTorchrunContractWithAChiefPortPerAllocation) {
  std::string session = RegisterAgent("a1", 3, {}, "10.1.2.3", 40000, 40001);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  ASSERT_EQ(CreateExperiment("e2"), 2);
  std::vector<v1::LaunchCommand> launches = Launches("a1", session);
  if (launches.size() < 2) {
    for (auto& l : Launches("a1", session)) launches.push_back(l);
  }
  ASSERT_EQ(launches.size(), 2u);
  std::set<int> ports;
  for (const auto& l : launches) {
    EXPECT_EQ(l.chief_address(), "10.1.2.3");
    EXPECT_EQ(l.restart_count(), 0);
    EXPECT_EQ(l.max_restarts(), 5);
    EXPECT_EQ(l.run_id(), absl::StrCat("det-trial-", l.trial_id()));
    ports.insert(l.chief_port());
  }
  EXPECT_EQ(ports, (std::set<int>{40000, 40001}));

  // The range is exhausted: the third waits and says why.
  ASSERT_EQ(CreateExperiment("e3"), 3);
  EXPECT_THAT(GetTrial(3).pending_reason(), HasSubstr("chief port on agent a1"));

  // After a master restart the ports of the running allocations are still held.
  RestartMaster();
  session = RegisterAgent("a1", 3, {"1.0", "2.0"}, "10.1.2.3", 40000, 40001);
  EXPECT_THAT(GetTrial(3).pending_reason(), HasSubstr("chief port on agent a1"));
  EXPECT_EQ(GetTrial(1).allocation().chief_port() + GetTrial(2).allocation().chief_port(), 80001);

  // Trial 1 fails (rank exits 1): requeued ahead of trial 3 (older), its rerun gets the
  // freed port and counts the restart; trial 3 still waits.
  const int freed = GetTrial(1).allocation().chief_port();
  ASSERT_TRUE(ReportExit("a1", session, "1.0", 1).ok());
  launches = Launches("a1", session);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].allocation_id(), "1.1");
  EXPECT_EQ(launches[0].chief_port(), freed);
  EXPECT_EQ(launches[0].restart_count(), 1);
  EXPECT_EQ(launches[0].run_id(), "det-trial-1");
  EXPECT_THAT(GetTrial(3).pending_reason(), HasSubstr("chief port on agent a1"));
  // Trial 2 ends: trial 3 gets its port.
  const int trial2_port = GetTrial(2).allocation().chief_port();
  ASSERT_TRUE(ReportExit("a1", session, "2.0", 0).ok());
  launches = Launches("a1", session);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].allocation_id(), "3.0");
  EXPECT_EQ(launches[0].chief_port(), trial2_port);
}

TEST_F(MasterTest, AnAgentWithoutAdvertiseAddressIsReachedByItsHostnameOnTheDefaultPorts) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  EXPECT_EQ(launch.chief_address(), "host-a1");
  EXPECT_EQ(launch.chief_port(), 29500);
}

// Issue 25: the resource-pool name was checked before the cluster secret, so a caller
// without the secret learned which pools exist.
TEST_F(MasterTest, TheClusterSecretIsCheckedBeforeAnythingElse) {
  v1::RegisterRequest req;
  req.set_agent_id("a1");
  req.set_cluster_secret("not-the-secret");
  req.set_resource_pool("no-such-pool");
  v1::RegisterResponse resp;
  absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::Register, req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_THAT(st.message(), Not(HasSubstr("no-such-pool")));
  req.set_cluster_secret("secret");
  st = Sync<AgentHandler>(&master_->service(), &AgentHandler::Register, req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("resource_pool 'no-such-pool'"));
}

TEST_F(MasterTest, ABadChiefPortRangeIsRefused) {
  v1::RegisterRequest req;
  req.set_agent_id("a1");
  req.set_cluster_secret("secret");
  req.set_chief_port_first(30000);
  req.set_chief_port_last(29000);
  v1::RegisterResponse resp;
  absl::Status st = Sync<AgentHandler>(&master_->service(), &AgentHandler::Register, req, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chief_port_range"));
}

// ShouldPreempt: false while the run may go on; a long poll is answered as soon as the
// master asks the run to stop, with the reason; FailedPrecondition once it has ended;
// only the allocation's own token is accepted.
// A master restart while ranks wait at a rendezvous loses the round (rounds live in
// memory), not the allocation: each rank repeats its call with its value, and the round
// completes on the new master with the same tokens. (Moved from http_server_test, where
// it waited on real-time gRPC deadlines.)
TEST_F(MasterTest, RendezvousCompletesAcrossAMasterRestart) {
  std::string session = RegisterAgent("a1", 2);
  ASSERT_EQ(CreateExperiment("rdv", 2), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  ASSERT_EQ(launch.ranks_size(), 2);
  struct Call {
    v1::RendezvousRequest req;
    v1::RendezvousResponse resp;
    Pending answer;
  };
  auto call = [&](int rank) {
    auto c = std::make_unique<Call>();
    *c->req.mutable_auth() = Auth(launch);
    c->req.mutable_auth()->set_rank(rank);
    c->req.set_key("k/0");
    c->req.set_address(absl::StrCat("addr-", rank));
    master_->service().Rendezvous(c->req, &c->resp, c->answer.Callback());
    return c;
  };
  // A read queued after a call has run once it answers: the call has been handled.
  auto handled = [&] { GetTrial(1); };

  // Rank 0 arrives and waits; the master restarts (the wait ends with it) and the agent
  // registers again with the allocation still running.
  auto lost = call(0);
  handled();
  EXPECT_FALSE(lost->answer.done.HasBeenNotified());
  RestartMaster();
  ASSERT_TRUE(lost->answer.Wait());
  EXPECT_FALSE(lost->answer.status.ok());
  session = RegisterAgent("a1", 2, {launch.allocation_id()});
  // Rank 1 arrives at the new master, which has not heard of rank 0 yet.
  auto rank1 = call(1);
  handled();
  EXPECT_FALSE(rank1->answer.done.HasBeenNotified());
  // Rank 0 repeats its call: the round completes for both.
  auto rank0 = call(0);
  for (Call* c : {rank0.get(), rank1.get()}) {
    ASSERT_TRUE(c->answer.Wait());
    ASSERT_TRUE(c->answer.status.ok()) << c->answer.status;
    EXPECT_TRUE(c->resp.ready());
    ASSERT_EQ(c->resp.addresses_size(), 2);
    EXPECT_EQ(c->resp.addresses(0), "addr-0");
    EXPECT_EQ(c->resp.addresses(1), "addr-1");
  }
}

TEST_F(MasterTest, ShouldPreemptLongPollsUntilTheMasterAsksTheRunToStop) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);

  v1::ShouldPreemptRequest now;
  *now.mutable_auth() = Auth(launch);
  v1::ShouldPreemptResponse resp;
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ShouldPreempt, now, &resp).ok());
  EXPECT_FALSE(resp.preempt());

  v1::ShouldPreemptRequest bad = now;
  bad.mutable_auth()->set_token("not-the-token");
  absl::Status st = Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ShouldPreempt, bad, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);

  // A long poll that times out (on the master's clock) answers false.
  v1::ShouldPreemptRequest poll = now;
  poll.set_wait_ms(5000);
  Pending timed_out;
  v1::ShouldPreemptResponse timed_out_resp;
  master_->service().ShouldPreempt(poll, &timed_out_resp, timed_out.Callback());
  EXPECT_FALSE(timed_out.Wait(absl::Milliseconds(200)));
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(timed_out.Wait());
  EXPECT_TRUE(timed_out.status.ok());
  EXPECT_FALSE(timed_out_resp.preempt());

  // A long poll, answered as soon as the experiment is paused.
  poll.set_wait_ms(60000);
  Pending paused;
  v1::ShouldPreemptResponse paused_resp;
  master_->service().ShouldPreempt(poll, &paused_resp, paused.Callback());
  // The loop runs work in order: once this call is answered, the poll waits on the master.
  v1::ListCheckpointsRequest barrier;
  barrier.set_experiment_id(1);
  v1::ListCheckpointsResponse barrier_resp;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::ListCheckpoints, barrier, &barrier_resp).ok());
  EXPECT_FALSE(paused.done.HasBeenNotified());
  v1::PauseExperimentRequest pause;
  pause.set_id(1);
  v1::PauseExperimentResponse pause_resp;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::PauseExperiment, pause, &pause_resp).ok());
  ASSERT_TRUE(paused.Wait());
  ASSERT_TRUE(paused.status.ok()) << paused.status;
  EXPECT_TRUE(paused_resp.preempt());
  EXPECT_EQ(paused_resp.reason(), "experiment paused");

  // Through the real gRPC WorkerService: true at once now.
  auto stub = v1::WorkerService::NewStub(
      grpc::CreateChannel(master_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  grpc::Status grpc_st = stub->ShouldPreempt(&ctx, poll, &resp);
  ASSERT_TRUE(grpc_st.ok()) << grpc_st.error_message();
  EXPECT_TRUE(resp.preempt());
  EXPECT_EQ(resp.reason(), "experiment paused");

  // Asked again: true at once.
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ShouldPreempt, poll, &resp).ok());
  EXPECT_TRUE(resp.preempt());

  ASSERT_TRUE(ReportExit("a1", session, launch.allocation_id(), 0).ok());
  st = Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ShouldPreempt, now, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("allocation 1.0 has ended"));
}

TEST_F(MasterTest, CheckpointMetadataMustBeAJsonObjectAndIsListed) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  v1::ReportCheckpointRequest req;
  *req.mutable_auth() = Auth(launch);
  req.mutable_checkpoint()->set_uuid("c-1");
  req.mutable_checkpoint()->set_total_batches(10);
  req.mutable_checkpoint()->set_storage_path("/ckpt/c-1");
  v1::ReportCheckpointResponse resp;
  for (const std::string bad : {"[1, 2]", "not json", "3"}) {
    req.mutable_checkpoint()->set_metadata_json(bad);
    absl::Status st =
        Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportCheckpoint, req, &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("checkpoint.metadata_json")) << bad;
  }
  req.mutable_checkpoint()->set_metadata_json(R"({"epoch": 3, "note": "best"})");
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportCheckpoint, req, &resp).ok());
  req.mutable_checkpoint()->set_uuid("c-2");
  req.mutable_checkpoint()->set_storage_path("/ckpt/c-2");
  req.mutable_checkpoint()->clear_metadata_json();
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportCheckpoint, req, &resp).ok());

  RestartMaster();  // Stored, not only kept in memory.
  v1::ListCheckpointsRequest list;
  list.set_experiment_id(1);
  v1::ListCheckpointsResponse listed;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::ListCheckpoints, list, &listed).ok());
  ASSERT_EQ(listed.checkpoints_size(), 2);
  EXPECT_EQ(listed.checkpoints(0).metadata_json(), R"({"epoch": 3, "note": "best"})");
  EXPECT_EQ(listed.checkpoints(1).metadata_json(), "");
}

TEST_F(MasterTest, ATrialThatCompletesWithoutMetricsOrProgressSaysSo) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  ASSERT_TRUE(ReportExit("a1", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(GetTrial(1).state(), v1::STATE_COMPLETED);
  EXPECT_TRUE(LogsEventually(1, "trial 1 reported no metrics and no progress: "));
}

TEST_F(MasterTest, ATrialThatReportedMetricsGetsNoSuchWarning) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("e1"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  v1::ReportMetricsRequest req;
  *req.mutable_auth() = Auth(launch);
  req.set_trial_id(1);
  v1::Metrics* m = req.add_metrics();
  m->set_group("training");
  m->set_total_batches(10);
  (*m->mutable_values())["loss"] = 0.5;
  v1::ReportMetricsResponse resp;
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportMetrics, req, &resp).ok());
  ASSERT_TRUE(ReportExit("a1", session, launch.allocation_id(), 0).ok());
  ASSERT_TRUE(LogsEventually(1, "trial COMPLETED"));
  EXPECT_THAT(TrialLogs(1), Not(HasSubstr("reported no metrics")));
}

// The requeue race (issue 14): an agent is lost while it runs a checkpoint GC task; the
// timer that requeues the task and a read issued at the same moment meet. The read must
// never see the half-done state (requeued, reason still empty) that the scheduling pass
// completes: reads are answered from the snapshot published at the end of a turn, after
// its scheduling pass. The loop is held (in a write's reply) while the clock moves past
// agent_reconnect_wait and the read is issued; every read after shows either the task
// before its requeue or the requeued task with its reason.
TEST_F(MasterTest, AReadIssuedWithTheRequeueNeverSeesItWithoutItsWaitingReason) {
  config_.agent_timeout = absl::Seconds(1);
  config_.agent_reconnect_wait = absl::Seconds(1);
  RestartMaster();
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("gc"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  for (int b : {10, 20, 30}) {
    v1::ReportCheckpointRequest req;
    *req.mutable_auth() = Auth(launch);
    req.mutable_checkpoint()->set_uuid(absl::StrCat("c-", b));
    req.mutable_checkpoint()->set_total_batches(b);
    req.mutable_checkpoint()->set_storage_path(absl::StrCat("/ckpt/c-", b));
    v1::ReportCheckpointResponse resp;
    ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportCheckpoint, req, &resp).ok());
  }
  ASSERT_TRUE(ReportExit("a1", session, launch.allocation_id(), 0).ok());
  ASSERT_EQ(NextLaunch("a1", session).allocation_id(), "gc-1.0");

  // The agent falls silent: the master notices and arms the agent_reconnect_wait timer.
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(LogsEventually(1, "stopped answering during checkpoint garbage collection gc-1.0"));

  // The GC tasks as a read shows them; fails the test on a requeued one without its reason.
  auto gc_tasks = [&]() {
    v1::ListTasksResponse tasks;
    EXPECT_TRUE(Api(&master_->service(), &ApiHandler::ListTasks, v1::ListTasksRequest(), &tasks).ok());
    std::vector<v1::Task> gc;
    for (const auto& t : tasks.tasks()) {
      if (t.type() != "CHECKPOINT_GC") continue;
      if (t.allocation_id() == "gc-1.1") {
        EXPECT_EQ(t.state(), v1::STATE_QUEUED);
        EXPECT_THAT(t.pending_reason(), HasSubstr("no agents in resource pool 'default'"));
      }
      gc.push_back(t);
    }
    return gc;
  };
  gc_tasks();  // read lately: published at every turn's end from now on

  // Hold the loop (a write's reply runs on it), move past the wait, read, release.
  absl::Notification held, release;
  Pending write;
  v1::SetTemplateRequest set;
  set.set_name("hold");
  set.set_config_yaml("description: hold\n");
  v1::SetTemplateResponse set_resp;
  master_->service().SetTemplate(Caller(), set, &set_resp, [&](absl::Status st) {
    held.Notify();
    release.WaitForNotification();
    write.Callback()(st);
  });
  ASSERT_TRUE(held.WaitForNotificationWithTimeout(absl::Seconds(20)));
  clock_.Advance(absl::Seconds(2));
  std::vector<v1::Task> during = gc_tasks();  // answered while the loop is held
  release.Notify();
  ASSERT_TRUE(write.Wait());
  ASSERT_EQ(during.size(), 1u);
  EXPECT_EQ(during[0].allocation_id(), "gc-1.0");
  ASSERT_TRUE(::det::testing::WaitUntil(
      "the GC task requeued as gc-1.1",
      [&] {
        std::vector<v1::Task> gc = gc_tasks();
        return gc.size() == 1 && gc[0].allocation_id() == "gc-1.1";
      },
      absl::Seconds(20)));
}

// Persist before acknowledge, with a store that refuses chosen writes: a refused write is
// an error to its caller and no reader ever sees the state it would have written; after a
// restart on the same store, everything acknowledged is there.
class MasterFaultTest : public MasterTest {
 protected:
  void SetUp() override {
    config_ = testing::LoopbackMasterConfig("/nonexistent-unused");
    config_.db_path = "(memory)";
    StartOnMemory();
  }
  void TearDown() override {
    if (master_) master_->Shutdown();
    master_.reset();  // Before memory_, which its store wraps.
  }
  // A master over memory_ (kept across restarts), behind a fresh fault injector.
  void StartOnMemory() {
    auto faults = std::make_unique<FaultInjectingStore>(memory_);
    faults_ = faults.get();
    auto m = Master::Create(config_, clock_, std::move(faults));
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = std::move(*m);
  }
  void RestartOnMemory() {
    master_->Shutdown();
    master_.reset();
    StartOnMemory();
  }
  v1::Experiment GetExperiment(int64_t id) {
    v1::GetExperimentRequest req;
    req.set_id(id);
    v1::GetExperimentResponse resp;
    EXPECT_TRUE(Api(&master_->service(), &ApiHandler::GetExperiment, req, &resp).ok());
    return resp.experiment();
  }
  absl::Status ReportMetrics(const v1::LaunchCommand& launch, int64_t batches) {
    v1::ReportMetricsRequest req;
    *req.mutable_auth() = Auth(launch);
    req.set_trial_id(launch.trial_id());
    v1::Metrics* m = req.add_metrics();
    m->set_group("training");
    m->set_total_batches(batches);
    (*m->mutable_values())["loss"] = 1.0 / batches;
    v1::ReportMetricsResponse resp;
    return Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportMetrics, req, &resp);
  }
  absl::Status ReportCheckpoint(const v1::LaunchCommand& launch, const std::string& uuid) {
    v1::ReportCheckpointRequest req;
    *req.mutable_auth() = Auth(launch);
    req.mutable_checkpoint()->set_uuid(uuid);
    req.mutable_checkpoint()->set_total_batches(10);
    req.mutable_checkpoint()->set_storage_path("/ckpt/" + uuid);
    v1::ReportCheckpointResponse resp;
    return Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ReportCheckpoint, req, &resp);
  }
  int MetricRows(int64_t trial) {
    v1::GetTrialMetricsRequest req;
    req.set_trial_id(trial);
    v1::GetTrialMetricsResponse resp;
    EXPECT_TRUE(Api(&master_->service(), &ApiHandler::GetTrialMetrics, req, &resp).ok());
    return resp.metrics_size();
  }
  std::vector<std::string> Checkpoints(int64_t experiment) {
    v1::ListCheckpointsRequest req;
    req.set_experiment_id(experiment);
    v1::ListCheckpointsResponse resp;
    EXPECT_TRUE(Api(&master_->service(), &ApiHandler::ListCheckpoints, req, &resp).ok());
    std::vector<std::string> out;
    for (const auto& c : resp.checkpoints()) out.push_back(c.uuid());
    return out;
  }

  InMemoryStore memory_;
  FaultInjectingStore* faults_ = nullptr;
};

TEST_F(MasterFaultTest, ARefusedWriteIsAnErrorNoReaderSeesAndAcknowledgedStateSurvivesARestart) {
  // An experiment the store refuses does not exist for anyone.
  faults_->FailNthWrite(1, "InsertExperiment");
  v1::CreateExperimentRequest create;
  create.set_config_yaml(ExperimentYaml("refused"));
  v1::CreateExperimentResponse created;
  absl::Status st = Api(&master_->service(), &ApiHandler::CreateExperiment, create, &created);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("injected fault: InsertExperiment"));
  v1::ListExperimentsResponse listed;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::ListExperiments, v1::ListExperimentsRequest(),
                  &listed).ok());
  EXPECT_EQ(listed.total(), 0);

  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("kept"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);

  // Metric rows the store refuses: the report fails; no rows, no summary.
  faults_->FailNthWrite(1, "AddMetrics");
  st = ReportMetrics(launch, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(MetricRows(1), 0);
  EXPECT_TRUE(GetTrial(1).training_summary().empty());
  EXPECT_EQ(GetTrial(1).total_batches(), 0);
  // Its user sees it in describe.
  EXPECT_THAT(GetTrial(1).warnings(),
              ElementsAre("metric rows refused: 1 (the master could not store them: injected "
                          "fault: AddMetrics)"));
  ASSERT_TRUE(ReportMetrics(launch, 10).ok());  // Acknowledged.

  // A checkpoint the store refuses is not listed, and is not the trial's latest.
  faults_->FailNthWrite(1, "AddCheckpoint");
  st = ReportCheckpoint(launch, "c-refused");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Checkpoints(1).empty());
  EXPECT_EQ(GetTrial(1).latest_checkpoint(), "");
  EXPECT_THAT(GetTrial(1).warnings(),
              Contains("checkpoint reports refused: 1 (the master could not store them: "
                       "injected fault: AddCheckpoint)"));
  ASSERT_TRUE(ReportCheckpoint(launch, "c-kept").ok());  // Acknowledged.
  EXPECT_EQ(GetTrial(1).latest_checkpoint(), "/ckpt/c-kept");
  // The checkpoint row and the trial's latest_checkpoint are one write: a worker that
  // retries an acknowledged report (its answer lost) stores nothing twice.
  ASSERT_TRUE(ReportCheckpoint(launch, "c-kept").ok());
  EXPECT_EQ(Checkpoints(1).size(), 1u);
  // The refused report retried once the store takes it again.
  ASSERT_TRUE(ReportCheckpoint(launch, "c-refused").ok());
  EXPECT_EQ(GetTrial(1).latest_checkpoint(), "/ckpt/c-refused");
  EXPECT_EQ(Checkpoints(1).size(), 2u);

  // A pause the store refuses: still ACTIVE, and its workers are not asked to stop.
  faults_->FailNthWrite(1, "UpdateExperiment");
  v1::PauseExperimentRequest pause;
  pause.set_id(1);
  v1::PauseExperimentResponse paused;
  st = Api(&master_->service(), &ApiHandler::PauseExperiment, pause, &paused);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetExperiment(1).state(), v1::STATE_ACTIVE);
  v1::ShouldPreemptRequest preempt;
  *preempt.mutable_auth() = Auth(launch);
  v1::ShouldPreemptResponse preempt_resp;
  ASSERT_TRUE(Sync<WorkerHandler>(&master_->service(), &WorkerHandler::ShouldPreempt, preempt,
                                  &preempt_resp).ok());
  EXPECT_FALSE(preempt_resp.preempt());

  // A priority the store refuses is not shown; an acknowledged one is.
  v1::UpdateJobPriorityRequest priority;
  priority.set_experiment_id(1);
  priority.set_priority(7);
  v1::UpdateJobPriorityResponse priority_resp;
  faults_->FailNthWrite(1, "UpdateExperiment");
  st = Api(&master_->service(), &ApiHandler::UpdateJobPriority, priority, &priority_resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(GetExperiment(1).priority(), 7);
  priority.set_priority(9);
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::UpdateJobPriority, priority, &priority_resp).ok());

  // The launch report the store refuses leaves the run STARTING.
  faults_->FailNthWrite(1, "UpsertAllocation");
  v1::ReportLaunchedRequest launched;
  launched.set_agent_id("a1");
  launched.set_session_id(session);
  launched.set_allocation_id(launch.allocation_id());
  launched.add_ranks(0);
  v1::ReportLaunchedResponse launched_resp;
  st = Sync<AgentHandler>(&master_->service(), &AgentHandler::ReportLaunched, launched, &launched_resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetTrial(1).state(), v1::STATE_STARTING);
  EXPECT_GT(faults_->writes_failed(), 0);

  // After a restart on the same store, everything acknowledged is there, nothing refused.
  RestartOnMemory();
  v1::ListExperimentsResponse after;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::ListExperiments, v1::ListExperimentsRequest(),
                  &after).ok());
  ASSERT_EQ(after.total(), 1);
  EXPECT_EQ(after.experiments(0).name(), "kept");
  EXPECT_EQ(after.experiments(0).priority(), 9);
  EXPECT_EQ(after.experiments(0).state(), v1::STATE_ACTIVE);
  EXPECT_EQ(MetricRows(1), 1);
  EXPECT_EQ(GetTrial(1).total_batches(), 10);
  EXPECT_EQ(Checkpoints(1), (std::vector<std::string>{"c-kept", "c-refused"}));
  EXPECT_EQ(GetTrial(1).latest_checkpoint(), "/ckpt/c-refused");
  // What was refused is still counted, with the trial's next write that succeeded.
  EXPECT_THAT(GetTrial(1).warnings(),
              ElementsAre(HasSubstr("metric rows refused: 1"), HasSubstr("checkpoint reports refused: 1")));
  EXPECT_EQ(GetTrial(1).allocation().id(), "1.0");
}

// A run whose allocation the store refuses is never launched: the trial stays queued and
// says why, and is launched once the store accepts it.
TEST_F(MasterFaultTest, ARunTheStoreRefusesIsNotLaunched) {
  std::string session = RegisterAgent("a1", 1);
  faults_->FailWrites(true, "UpsertAllocation");
  ASSERT_EQ(CreateExperiment("e1"), 1);
  EXPECT_EQ(GetTrial(1).state(), v1::STATE_QUEUED);
  EXPECT_THAT(GetTrial(1).pending_reason(), HasSubstr("cannot store its allocation"));
  faults_->FailWrites(false, "UpsertAllocation");
  v1::EnableAgentRequest enable;  // Any change that asks for a scheduling pass.
  enable.set_agent_id("a1");
  v1::EnableAgentResponse enabled;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::EnableAgent, enable, &enabled).ok());
  EXPECT_EQ(NextLaunch("a1", session).allocation_id(), "1.0");
}


// The master on PostgreSQL (master.yaml's db: {type: postgres, url, password_file}): while
// the server is stopped, writes fail with UNAVAILABLE and are not acknowledged; once it is
// back the master reconnects by itself; after a master restart every acknowledged row is
// there and nothing refused.
class MasterPostgresTest : public MasterFaultTest {
 protected:
  void SetUp() override {
    auto server = testing::PostgresServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    postgres_ = std::move(*server);
    auto url = postgres_->CreateDatabase("det");
    ASSERT_TRUE(url.ok()) << url.status();
    dir_ = testing::FreshTestDir("master_pg_");
    config_ = testing::LoopbackMasterConfig(dir_);
    config_.db_type = "postgres";
    config_.db_url = *url;
    // The server trusts local connections; the file is read all the same.
    config_.db_password_file = dir_ + "-db-password";
    std::ofstream(config_.db_password_file) << "unused\n";
    StartMaster();
  }
  void TearDown() override {
    if (master_) master_->Shutdown();
    master_.reset();
    postgres_.reset();
  }

  std::unique_ptr<testing::PostgresServer> postgres_;
};

TEST_F(MasterPostgresTest, WritesFailUnavailableWhilePostgresIsDownAndNothingAcknowledgedIsLost) {
  std::string session = RegisterAgent("a1", 1);
  ASSERT_EQ(CreateExperiment("on-postgres"), 1);
  v1::LaunchCommand launch = NextLaunch("a1", session);
  ASSERT_TRUE(ReportMetrics(launch, 5).ok());

  ASSERT_TRUE(postgres_->Stop().ok());
  absl::Status st = ReportMetrics(launch, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("database"));
  v1::CreateExperimentRequest create;
  create.set_config_yaml(ExperimentYaml("refused"));
  v1::CreateExperimentResponse created;
  st = Api(&master_->service(), &ApiHandler::CreateExperiment, create, &created);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // Reads of the database (metric rows) fail alike.
  v1::GetTrialMetricsRequest rows;
  rows.set_trial_id(1);
  v1::GetTrialMetricsResponse rows_resp;
  st = Api(&master_->service(), &ApiHandler::GetTrialMetrics, rows, &rows_resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;

  // Back: the next writes reconnect by themselves.
  ASSERT_TRUE(postgres_->Restart().ok());
  ASSERT_TRUE(ReportMetrics(launch, 15).ok());
  EXPECT_EQ(CreateExperiment("after"), 2);

  RestartMaster();
  v1::ListExperimentsResponse listed;
  ASSERT_TRUE(Api(&master_->service(), &ApiHandler::ListExperiments, v1::ListExperimentsRequest(),
                  &listed).ok());
  ASSERT_EQ(listed.total(), 2);
  EXPECT_EQ(MetricRows(1), 2);
  EXPECT_EQ(GetTrial(1).total_batches(), 15);
}

}  // namespace
}  // namespace det::master
