// Starting allocations through a fake launcher: what each worker is started with, the
// model context on disk, and failures that name why.
#include "agent/allocations/starter.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/supervisor/allocation_record.h"
#include "agent/testing/fake_master_client.h"
#include "agent/testing/fake_process_launcher.h"
#include "common/clock/clock.h"
#include "common/rpc/context_sha256.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

class StarterTest : public ::testing::Test {
 protected:
  StarterTest()
      : session_(Config(), master_, {}, std::nullopt), stop_(clock_, absl::Milliseconds(1)) {}
  void SetUp() override {
    std::filesystem::remove_all(work_dir_);
    ASSERT_TRUE(PrepareWorkRoot(work_dir_).ok());
    config_.agent_id = "agent-a";
    config_.work_dir = work_dir_;
    config_.shim_path = "/bin/det-agent";
  }
  static std::string WorkDir() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    return absl::StrCat(tmp ? tmp : "/tmp", "/starter");
  }
  static config::AgentConfig Config() {
    config::AgentConfig c;
    c.agent_id = "agent-a";
    c.advertise_address = "127.0.0.1";
    c.work_dir = WorkDir();
    return c;
  }

  // Allocation `id`, `ranks` ranks running ./train.sh from its model context.
  v1::LaunchCommand Launch(const std::string& id, int ranks) {
    v1::LaunchCommand l;
    l.set_allocation_id(id);
    l.set_trial_id(1);
    l.add_argv("./train.sh");
    for (int r = 0; r < ranks; ++r) {
      v1::RankPlacement* p = l.add_ranks();
      p->set_rank(r);
      p->add_slot_ids(absl::StrCat(r));
    }
    l.set_world_size(ranks);
    v1::ModelContext context;
    v1::ContextFile* f = context.add_files();
    f->set_path("train.sh");
    f->set_content("#!/bin/sh\necho hi\n");
    f->set_mode(0755);
    l.mutable_model_context()->set_experiment_id(1);
    l.mutable_model_context()->set_sha256(rpc::ContextSha256(context.SerializeAsString()));
    master_.ServeContext(id, std::move(context));
    return l;
  }

  std::string work_dir_ = WorkDir();
  FakeMasterClient master_;
  FakeClock clock_;
  FakeProcessLauncher launcher_;
  Session session_;
  StopSignal stop_;
  StarterConfig config_;
  LaunchContext context_;
};

TEST_F(StarterTest, EachRankStartsInTheAllocationsDirectoryWithItsFiles) {
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  AllocationStarter::Result r = starter.Start(Launch("1.0", 2), context_);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.started, ElementsAre(0, 1));
  ASSERT_EQ(launcher_.workers().size(), 2u);
  const WorkerSpec& spec = launcher_.workers()[1]->spec();
  EXPECT_EQ(spec.shim_path, "/bin/det-agent");
  EXPECT_THAT(spec.argv, ElementsAre("./train.sh"));
  EXPECT_EQ(spec.cwd, work_dir_ + "/1.0");
  EXPECT_EQ(spec.stdout_path, RankOutputPath(work_dir_ + "/run/1.0", 1, 0));
  EXPECT_EQ(spec.exit_path, RankExitPath(work_dir_ + "/run/1.0", 1));
  EXPECT_THAT(spec.env, Contains(Pair("DET_SLOT_IDS", "1")));
  std::ifstream script(work_dir_ + "/1.0/train.sh");
  std::stringstream text;
  text << script.rdbuf();
  EXPECT_EQ(text.str(), "#!/bin/sh\necho hi\n");
  Allocation& a = *r.allocation;
  EXPECT_EQ(a.id(), "1.0");
  EXPECT_FALSE(a.exited(0));
  EXPECT_EQ(a.process(1)->pid(), launcher_.workers()[1]->pid());
}

TEST_F(StarterTest, AContextTheMasterCannotServeFailsEveryRankNamingWhy) {
  master_.FailContexts(absl::PermissionDeniedError("not yours"));
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  AllocationStarter::Result r = starter.Start(Launch("1.0", 2), context_);
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("not yours")));
  EXPECT_THAT(r.started, IsEmpty());
  EXPECT_TRUE(launcher_.workers().empty());
  EXPECT_TRUE(r.allocation->exited(0));
  EXPECT_TRUE(r.allocation->exited(1));
  EXPECT_EQ(r.allocation->process(0), nullptr);
}

TEST_F(StarterTest, AnUnreachableMasterIsAskedThreeTimesForTheContext) {
  master_.FailContexts(absl::UnavailableError("master down"));
  std::thread mover([&] {
    while (master_.context_fetches() < 3) clock_.Advance(absl::Milliseconds(100));
  });
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  AllocationStarter::Result r = starter.Start(Launch("1.0", 1), context_);
  mover.join();
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("master down")));
  EXPECT_EQ(master_.context_fetches(), 3);
}

TEST_F(StarterTest, ARankThatCannotStartStopsTheLaunchThere) {
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  launcher_.FailStarts(absl::PermissionDeniedError("cannot exec the shim"));
  AllocationStarter::Result r = starter.Start(Launch("1.0", 2), context_);
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kPermissionDenied, "cannot exec the shim"));
  EXPECT_THAT(r.started, IsEmpty());
}

TEST_F(StarterTest, AnEmptyEntrypointIsRefused) {
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  v1::LaunchCommand launch = Launch("1.0", 1);
  launch.clear_argv();
  AllocationStarter::Result r = starter.Start(launch, context_);
  EXPECT_THAT(r.status,
              StatusIs(absl::StatusCode::kInvalidArgument, "the launch has an empty entrypoint"));
}

TEST_F(StarterTest, ATorchEntrypointNeedsAnAgentThatFoundTorch) {
  PythonChoice python;
  python.path = "/usr/bin/python3";
  python.reason = "found on PATH";
  config_.python = python;
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  v1::LaunchCommand launch = Launch("1.0", 1);
  launch.set_argv(0, "python3");
  launch.add_argv("-m");
  launch.add_argv("det.launch.torch_distributed");
  AllocationStarter::Result r = starter.Start(launch, context_);
  EXPECT_THAT(r.status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("torch")));
  EXPECT_EQ(master_.context_fetches(), 0);
}

TEST_F(StarterTest, LeftoversOfAnEarlierAllocationOfTheSameIdAreRemoved) {
  std::filesystem::create_directories(work_dir_ + "/run/1.0");
  std::ofstream(RankOutputPath(work_dir_ + "/run/1.0", 0, 0)) << "old output\n";
  AllocationStarter starter(config_, launcher_, master_, session_, stop_);
  ASSERT_TRUE(starter.Start(Launch("1.0", 1), context_).status.ok());
  EXPECT_FALSE(std::filesystem::exists(RankOutputPath(work_dir_ + "/run/1.0", 0, 0)));
}

}  // namespace
}  // namespace det::agent
