#include "agent/launcher/launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> AsMap(const EnvironmentVariables& env) {
  return {env.begin(), env.end()};
}

v1::LaunchCommand TwoAgentLaunch() {
  v1::LaunchCommand l;
  l.set_world_size(4);
  l.set_num_agents(2);
  l.set_agent_rank(1);
  (*l.mutable_env())["DET_TRIAL_ID"] = "7";
  for (int r = 2; r < 4; ++r) {
    auto* p = l.add_ranks();
    p->set_rank(r);
    p->set_agent_id("b");
    p->set_local_rank(r - 2);
    p->add_slot_ids(std::to_string(r - 2));
  }
  return l;
}

TEST(WorkerEnvironment, CarriesRanksAndHidesTheSecret) {
  v1::LaunchCommand l = TwoAgentLaunch();
  LaunchContext ctx{"b", "10.0.0.1:8080", "cuda", {"/opt/det/bin"}};
  auto env = AsMap(WorkerEnvironment(l, l.ranks(1), ctx, "/work/7.0",
                                     {{"PATH", "/usr/bin"}, {"DET_CLUSTER_SECRET", "s3cret"}, {"HOME", "/root"}}));
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["CROSS_RANK"], "1");
  EXPECT_EQ(env["CROSS_SIZE"], "2");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env["DET_MASTER"], "10.0.0.1:8080");
  EXPECT_EQ(env["DET_TRIAL_ID"], "7");
  EXPECT_EQ(env["PATH"], "/opt/det/bin:/usr/bin");
  EXPECT_EQ(env["HOME"], "/root");
  EXPECT_EQ(env.count("DET_CLUSTER_SECRET"), 0u);
}

TEST(WorkerEnvironment, CpuWorkersSeeNoGpu) {
  v1::LaunchCommand l = TwoAgentLaunch();
  LaunchContext ctx{"b", "m:1", "cpu", {}};
  auto env = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, "/w", {}));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(env["DET_SLOT_IDS"], "0");
}

// One launch of torchrun's contract: what every variable is, for each kind of launch.
struct ContractCase {
  std::string name;
  // Changes TwoAgentLaunch() (rank 3 of 4, the second rank on agent "b", agent rank 1 of 2).
  std::function<void(v1::LaunchCommand&)> launch;
  LaunchContext ctx;
  EnvironmentVariables base;
  // Expected values; kAbsent: not set at all.
  std::map<std::string, std::string> want;
};

constexpr char kAbsent[] = "<absent>";

v1::LaunchCommand WithChief(v1::LaunchCommand l) {
  l.set_chief_address("10.0.0.5");
  l.set_chief_port(29512);
  l.set_restart_count(2);
  l.set_max_restarts(5);
  l.set_run_id("exp-3-trial-7");
  return l;
}

TEST(WorkerEnvironment, TorchrunContract) {
  LaunchContext eight_cpus{"b", "m:1", "cpu", {}, "/usr/bin/python3", {"/opt/det/python"}, 8};
  std::vector<ContractCase> cases = {
      {"full contract",
       [](v1::LaunchCommand& l) { l = WithChief(l); },
       eight_cpus,
       {},
       {{"RANK", "3"},
        {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"GROUP_RANK", "1"},
        {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_RANK", "3"},
        {"ROLE_WORLD_SIZE", "4"},
        {"ROLE_NAME", "default"},
        {"MASTER_ADDR", "10.0.0.5"},
        {"MASTER_PORT", "29512"},
        {"TORCHELASTIC_RESTART_COUNT", "2"},
        {"TORCHELASTIC_MAX_RESTARTS", "5"},
        {"TORCHELASTIC_RUN_ID", "exp-3-trial-7"},
        {"OMP_NUM_THREADS", "4"},
        {"DET_PYTHON", "/usr/bin/python3"},
        {"PYTHONPATH", "/work/7.0:/opt/det/python"},
        {"PWD", "/work/7.0"}}},
      {"no chief yet: no MASTER_ADDR/PORT, no run id; restarts 0",
       [](v1::LaunchCommand&) {},
       eight_cpus,
       {{"MASTER_ADDR", "agent-own"}, {"MASTER_PORT", "1"}, {"TORCHELASTIC_RUN_ID", "x"}},
       {{"MASTER_ADDR", kAbsent},
        {"MASTER_PORT", kAbsent},
        {"TORCHELASTIC_RUN_ID", kAbsent},
        {"TORCHELASTIC_RESTART_COUNT", "0"},
        {"TORCHELASTIC_MAX_RESTARTS", "0"}}},
      {"the experiment's OMP_NUM_THREADS wins",
       [](v1::LaunchCommand& l) { (*l.mutable_env())["OMP_NUM_THREADS"] = "3"; },
       eight_cpus,
       {{"OMP_NUM_THREADS", "16"}},
       {{"OMP_NUM_THREADS", "3"}}},
      {"the agent's own OMP_NUM_THREADS does not",
       [](v1::LaunchCommand&) {},
       eight_cpus,
       {{"OMP_NUM_THREADS", "16"}},
       {{"OMP_NUM_THREADS", "4"}}},
      {"more ranks than CPUs: one thread each",
       [](v1::LaunchCommand& l) {
         for (int r = 4; r < 8; ++r) {
           auto* p = l.add_ranks();
           p->set_rank(r);
           p->set_agent_id("b");
           p->set_local_rank(r - 2);
         }
       },
       LaunchContext{"b", "m:1", "cpu", {}, "", {}, 2},
       {},
       {{"LOCAL_WORLD_SIZE", "6"}, {"OMP_NUM_THREADS", "1"}, {"DET_PYTHON", kAbsent}}},
      {"det's values win over the experiment's",
       [](v1::LaunchCommand& l) {
         l = WithChief(l);
         (*l.mutable_env())["MASTER_ADDR"] = "1.2.3.4";
         (*l.mutable_env())["RANK"] = "0";
         (*l.mutable_env())["FOO"] = "bar";
       },
       eight_cpus,
       {},
       {{"MASTER_ADDR", "10.0.0.5"}, {"RANK", "3"}, {"FOO", "bar"}}},
      {"PYTHONPATH: context dir, python_path, then the experiment's",
       [](v1::LaunchCommand& l) { (*l.mutable_env())["PYTHONPATH"] = "/exp/lib"; },
       LaunchContext{"b", "m:1", "cpu", {}, "/py", {"/a", "/b"}, 1},
       {{"PYTHONPATH", "/agent/lib"}},
       {{"PYTHONPATH", "/work/7.0:/a:/b:/exp/lib"}}},
      {"PYTHONPATH: else the agent's",
       [](v1::LaunchCommand&) {},
       LaunchContext{"b", "m:1", "cpu", {}, "/py", {}, 1},
       {{"PYTHONPATH", "/agent/lib"}, {"PWD", "/stale"}},
       {{"PYTHONPATH", "/work/7.0:/agent/lib"}, {"PWD", "/work/7.0"}}},
  };
  for (const ContractCase& c : cases) {
    SCOPED_TRACE(c.name);
    v1::LaunchCommand l = TwoAgentLaunch();
    c.launch(l);
    auto env = AsMap(WorkerEnvironment(l, l.ranks(1), c.ctx, "/work/7.0", c.base));
    for (const auto& [name, value] : c.want) {
      if (value == kAbsent) {
        EXPECT_EQ(env.count(name), 0u) << name << "=" << env[name];
      } else {
        EXPECT_EQ(env[name], value) << name;
      }
    }
  }
}

TEST(WorkerEnvironment, RanksAcrossAgentsListenWhereTheAgentIsReached) {
  LaunchContext ctx{"b", "m:1", "cpu", {}, "", {}, 1, "10.0.0.7", "eth1"};
  struct Case {
    std::string name;
    int num_agents;
    std::map<std::string, std::string> experiment;
    EnvironmentVariables base;
    std::map<std::string, std::string> want;
  };
  std::vector<Case> cases = {
      {"across agents: the advertised address and its interface",
       2,
       {},
       {},
       {{"DET_COLLECTIVE_HOST", "10.0.0.7"},
        {"GLOO_SOCKET_IFNAME", "eth1"},
        {"NCCL_SOCKET_IFNAME", "eth1"}}},
      {"one agent: nothing (loopback serves)",
       1,
       {},
       {},
       {{"DET_COLLECTIVE_HOST", kAbsent},
        {"GLOO_SOCKET_IFNAME", kAbsent},
        {"NCCL_SOCKET_IFNAME", kAbsent}}},
      {"the experiment's and the agent's own settings win, each alone",
       2,
       {{"GLOO_SOCKET_IFNAME", "ib0"}},
       {{"NCCL_SOCKET_IFNAME", "ib1"}, {"DET_COLLECTIVE_HOST", "10.9.9.9"}},
       {{"DET_COLLECTIVE_HOST", "10.9.9.9"},
        {"GLOO_SOCKET_IFNAME", "ib0"},
        {"NCCL_SOCKET_IFNAME", "ib1"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::LaunchCommand l = TwoAgentLaunch();
    l.set_num_agents(c.num_agents);
    for (const auto& [k, v] : c.experiment) (*l.mutable_env())[k] = v;
    auto env = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, "/w", c.base));
    for (const auto& [name, value] : c.want) {
      if (value == kAbsent) {
        EXPECT_EQ(env.count(name), 0u) << name << "=" << env[name];
      } else {
        EXPECT_EQ(env[name], value) << name;
      }
    }
  }
  // Unknown address and interface: nothing set.
  v1::LaunchCommand l = TwoAgentLaunch();
  auto env = AsMap(WorkerEnvironment(l, l.ranks(0), LaunchContext{"b", "m:1"}, "/w", {}));
  EXPECT_EQ(env.count("DET_COLLECTIVE_HOST") + env.count("GLOO_SOCKET_IFNAME"), 0u);
}

TEST(WorkerEnvironment, RanksOfAnotherAgentAreNotLocal) {
  v1::LaunchCommand l = WithChief(TwoAgentLaunch());
  // A rank of the same allocation on agent "a" does not count towards this agent's ranks.
  auto* other = l.add_ranks();
  other->set_rank(0);
  other->set_agent_id("a");
  LaunchContext ctx{"b", "m:1", "cpu", {}, "", {}, 8};
  auto env = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, "/w", {}));
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["RANK"], "2");
}

TEST(WorkerArgv, PythonEntrypointsGetTheAgentsInterpreter) {
  LaunchContext with{"b", "m:1", "cpu", {}, "/usr/bin/python3", {}, 1};
  LaunchContext without{"b", "m:1", "cpu", {}, "", {}, 1};
  struct Case {
    std::vector<std::string> entrypoint;
    const LaunchContext* ctx;
    std::vector<std::string> want;
  };
  for (const Case& c : std::vector<Case>{
           {{"python3", "train.py", "--epochs", "1"}, &with,
            {"/usr/bin/python3", "train.py", "--epochs", "1"}},
           {{"python", "-m", "det.launch"}, &with, {"/usr/bin/python3", "-m", "det.launch"}},
           {{"python3"}, &with, {"/usr/bin/python3"}},
           // Only those two names: an explicit interpreter or another program stays.
           {{"/opt/py/bin/python3", "train.py"}, &with, {"/opt/py/bin/python3", "train.py"}},
           {{"python3.11", "train.py"}, &with, {"python3.11", "train.py"}},
           {{"det-fashion-mnist"}, &with, {"det-fashion-mnist"}},
           {{"train.py", "python3"}, &with, {"train.py", "python3"}},
           {{"python3", "train.py"}, &without, {"python3", "train.py"}},
           {{}, &with, {}},
       }) {
    EXPECT_EQ(WorkerArgv(c.entrypoint, *c.ctx), c.want);
  }
}

TEST(DefaultPythonPath, IsThePythonDirectoryBesideTheBinariesWhenThereIsOne) {
  std::string root = std::string(getenv("TEST_TMPDIR")) + "/bundle";
  ASSERT_TRUE(std::filesystem::create_directories(root + "/bin"));
  EXPECT_TRUE(DefaultPythonPath(root + "/bin/det-agent").empty());
  ASSERT_TRUE(std::filesystem::create_directories(root + "/python/det"));
  EXPECT_EQ(DefaultPythonPath(root + "/bin/det-agent"), std::vector<std::string>{root + "/python"});
  EXPECT_TRUE(DefaultPythonPath("").empty());
}

TEST(UsableCpuCount, IsPositiveAndAtMostTheOnlineCpus) {
  EXPECT_GE(UsableCpuCount(), 1);
  EXPECT_LE(UsableCpuCount(), sysconf(_SC_NPROCESSORS_ONLN));
}

TEST(WriteContext, WritesFilesAndRefusesEscapes) {
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/ctx";
  google::protobuf::RepeatedPtrField<v1::ContextFile> files;
  auto* f = files.Add();
  f->set_path("src/model.txt");
  f->set_content("weights");
  f->set_mode(0600);
  ASSERT_TRUE(WriteContext(dir, files).ok());
  std::ifstream in(dir + "/src/model.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "weights");

  for (const char* bad : {"../evil", "/etc/passwd", "a/../../b", ""}) {
    google::protobuf::RepeatedPtrField<v1::ContextFile> evil;
    evil.Add()->set_path(bad);
    absl::Status st = WriteContext(dir, evil);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(WorkerEnvironment, ATaskUserGetsTheWorkDirAsHomeAndItsName) {
  v1::LaunchCommand l = TwoAgentLaunch();
  LaunchContext ctx{"b", "m:1", "cpu", {}};
  EnvironmentVariables base = {{"HOME", "/root"}, {"USER", "root"}, {"LOGNAME", "root"}};
  auto as_agent = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, "/w/7.0", base));
  EXPECT_EQ(as_agent["HOME"], "/root");
  ctx.task_user = RunAs{65534, 65534};
  ctx.task_user_name = "nobody";
  auto as_task = AsMap(WorkerEnvironment(l, l.ranks(0), ctx, "/w/7.0", base));
  EXPECT_EQ(as_task["HOME"], "/w/7.0");
  EXPECT_EQ(as_task["USER"], "nobody");
  EXPECT_EQ(as_task["LOGNAME"], "nobody");
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(PrepareWorkRoot, WorkDirIsSearchableOnlyAndRunDirPrivate) {
  std::string root = std::string(getenv("TEST_TMPDIR")) + "/agent-root/work";
  ASSERT_TRUE(PrepareWorkRoot(root).ok());
  EXPECT_EQ(ModeOf(root), 0711u);
  EXPECT_EQ(ModeOf(root + "/launch"), 0711u);
  EXPECT_EQ(ModeOf(root + "/run"), 0700u);
  // Existing directories are tightened too.
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);
  ASSERT_EQ(chmod((root + "/run").c_str(), 0755), 0);
  ASSERT_TRUE(PrepareWorkRoot(root).ok());
  EXPECT_EQ(ModeOf(root), 0711u);
  EXPECT_EQ(ModeOf(root + "/run"), 0700u);
}

TEST(WriteLaunchFiles, LargeValuesReachWorkersAsPrivateFilesNamedByTheirVariables) {
  const std::string root = std::string(getenv("TEST_TMPDIR")) + "/launch-files";
  ASSERT_TRUE(PrepareWorkRoot(root).ok());
  const std::string work_dir = root + "/7.0";
  v1::LaunchCommand l = TwoAgentLaunch();
  // Each over Linux's 128 KiB limit on one environment string (MAX_ARG_STRLEN).
  const std::string config = "{\"description\":\"" + std::string(960 << 10, 'x') + "\"}";
  const std::string hparams = "{\"h\":\"" + std::string(200 << 10, 'y') + "\"}";
  (*l.mutable_env())["DET_EXPERIMENT_CONFIG"] = config;
  (*l.mutable_env())["DET_HPARAMS"] = hparams;
  (*l.mutable_env())["DET_TRIAL_SPEC"] = "{\"trial_id\":\"7\"}";
  // An experiment's variable cannot point a worker at another file.
  (*l.mutable_env())["DET_HPARAMS_FILE"] = "/etc/passwd";
  ASSERT_TRUE(WriteLaunchFiles(work_dir, l).ok());

  const std::string dir = root + "/launch/7.0";
  EXPECT_EQ(LaunchFilesDir(work_dir), dir);
  EXPECT_EQ(ModeOf(dir), 0700u);
  auto env = AsMap(WorkerEnvironment(l, l.ranks(0), LaunchContext{"b", "m:1"}, work_dir, {}));
  for (const auto& [name, want] : std::map<std::string, std::string>{
           {"DET_EXPERIMENT_CONFIG", config}, {"DET_HPARAMS", hparams},
           {"DET_TRIAL_SPEC", "{\"trial_id\":\"7\"}"}}) {
    EXPECT_EQ(env.count(name), 0u) << name;
    ASSERT_EQ(env[name + "_FILE"], dir + "/" + name);
    EXPECT_EQ(ModeOf(env[name + "_FILE"]), 0600u) << name;
    std::ifstream in(env[name + "_FILE"]);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), want) << name;
  }
  EXPECT_EQ(env["DET_TRIAL_ID"], "7");
  // Without a parent made by PrepareWorkRoot the write fails, naming the directory.
  absl::Status st = WriteLaunchFiles(std::string(getenv("TEST_TMPDIR")) + "/nowhere/7.0", l);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("nowhere/launch/7.0"));
}

TEST(HandOverWorkDir, GivesTheTreeToTheTaskUserWithoutFollowingLinks) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another user needs root; this test runs as uid " << geteuid();
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/handover";
  std::string outside = std::string(getenv("TEST_TMPDIR")) + "/outside";
  google::protobuf::RepeatedPtrField<v1::ContextFile> files;
  files.Add()->set_path("a/b/model.py");
  ASSERT_TRUE(WriteContext(dir, files).ok());
  std::ofstream(outside) << "agent's";
  std::filesystem::create_symlink(outside, dir + "/a/link");
  ASSERT_TRUE(HandOverWorkDir(dir, RunAs{65534, 65533}).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
  for (const std::string p : {dir, dir + "/a", dir + "/a/b", dir + "/a/b/model.py", dir + "/a/link"}) {
    struct stat st;
    ASSERT_EQ(lstat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 65534u) << p;
    EXPECT_EQ(st.st_gid, 65533u) << p;
  }
  struct stat st;
  ASSERT_EQ(stat(outside.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_TRUE(CheckUserCanReach("/usr/bin", RunAs{65534, 65533}).ok());
  absl::Status denied = CheckUserCanReach(dir, RunAs{65532, 65532});
  EXPECT_TRUE(absl::IsPermissionDenied(denied)) << denied;
  EXPECT_THAT(denied.message(), HasSubstr("uid 65532 (the task user) cannot reach '" + dir + "'"));
}

TEST(HandOverWorkDir, WithoutATaskUserOnlyTightensTheMode) {
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/mine";
  ASSERT_TRUE(WriteContext(dir, {}).ok());
  ASSERT_TRUE(HandOverWorkDir(dir, std::nullopt).ok());
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_TRUE(CheckUserCanReach(dir, std::nullopt).ok());
}

TEST(SafeName, KeepsOnlyHarmlessCharacters) {
  EXPECT_EQ(SafeName("12.0"), "12.0");
  EXPECT_EQ(SafeName("../x y"), "_.._x_y");
}

}  // namespace
}  // namespace det::agent

namespace det::agent {
namespace {

// The experiment owner's linked OS user replaces the agent's default task user; an agent
// that cannot switch to it refuses the launch naming the user instead of running the
// workers as itself; root is never a task user.
TEST(UseLaunchTaskUser, TheOwnersLinkedUserReplacesTheDefaultOrTheLaunchIsRefused) {
  LaunchContext defaults;
  defaults.task_user = RunAs{1000, 1000};
  defaults.task_user_name = "det-worker";
  v1::LaunchCommand plain;

  LaunchContext ctx = defaults;
  ASSERT_TRUE(UseLaunchTaskUser(plain, 0, 0, &ctx).ok());  // No link: the default.
  EXPECT_EQ(ctx.task_user, (RunAs{1000, 1000}));
  EXPECT_EQ(ctx.task_user_name, "det-worker");

  v1::LaunchCommand linked;
  linked.mutable_task_user()->set_agent_user("nobody");
  linked.mutable_task_user()->set_agent_uid(65534);
  linked.mutable_task_user()->set_agent_group("nogroup");
  linked.mutable_task_user()->set_agent_gid(65533);
  ctx = defaults;
  ASSERT_TRUE(UseLaunchTaskUser(linked, 0, 0, &ctx).ok());  // A root agent switches.
  EXPECT_EQ(ctx.task_user, (RunAs{65534, 65533}));
  EXPECT_EQ(ctx.task_user_name, "nobody");

  ctx = defaults;
  absl::Status refused = UseLaunchTaskUser(linked, 1000, 1000, &ctx);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("cannot run the workers as 'nobody' (uid 65534, group 'nogroup' gid "
                        "65533), the OS user linked to the experiment's owner: this agent "
                        "runs as uid 1000, not root"));

  ctx = defaults;  // An agent that is that user runs the workers as itself.
  ASSERT_TRUE(UseLaunchTaskUser(linked, 65534, 65533, &ctx).ok());
  EXPECT_FALSE(ctx.task_user.has_value());

  for (auto [uid, gid] : {std::pair{0, 65533}, std::pair{65534, 0}}) {
    v1::LaunchCommand root = linked;
    root.mutable_task_user()->set_agent_uid(uid);
    root.mutable_task_user()->set_agent_gid(gid);
    ctx = defaults;
    absl::Status st = UseLaunchTaskUser(root, 0, 0, &ctx);
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << uid << ":" << gid;
    EXPECT_THAT(std::string(st.message()), HasSubstr("uid and gid 0 are root's"));
    EXPECT_EQ(ctx.task_user, (RunAs{1000, 1000}));  // Unchanged.
  }
  v1::LaunchCommand huge = linked;
  huge.mutable_task_user()->set_agent_uid(int64_t{1} << 32);
  EXPECT_EQ(UseLaunchTaskUser(huge, 0, 0, &ctx).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace det::agent
