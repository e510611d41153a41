// The worker shim and WorkerProcess with real processes.
#include "agent/supervisor/worker_process.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/supervisor/shim.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::WaitUntil;
using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp ? tmp : "/tmp", "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    mkdir(dir_.c_str(), 0755);
  }

  WorkerSpec Spec(const std::string& script) {
    WorkerSpec s;
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* ws = std::getenv("TEST_WORKSPACE");
    s.shim_path =
        absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "det", "/agent/supervisor/test_shim");
    s.argv = {"/bin/sh", "-c", script};
    s.env = {{"PATH", "/usr/bin:/bin"}, {"DIR", dir_}};
    s.cwd = dir_;
    s.stdout_path = dir_ + "/out";
    s.stderr_path = dir_ + "/err";
    s.exit_path = dir_ + "/exit";
    return s;
  }

  // Waits (bounded) for a file the worker writes, and returns its content as a pid; 0 (and
  // a failure) when none came within 10 s.
  pid_t WaitForPid(const std::string& name) {
    std::string path = dir_ + "/" + name;
    pid_t pid = 0;
    EXPECT_TRUE(WaitUntil(
        absl::StrCat("a pid in ", name),
        [&] {
          std::string text(absl::StripAsciiWhitespace(Slurp(path)));
          return absl::SimpleAtoi(text, &pid) && pid > 0;
        },
        absl::Seconds(10)));
    return pid;
  }

  static WorkerExit WaitDone(WorkerProcess& w) {
    for (int i = 0; i < 300; ++i) {
      if (auto e = w.Wait(absl::Milliseconds(100))) return *e;
    }
    ADD_FAILURE() << "worker did not exit within 30 s";
    return {};
  }

  std::string dir_;
};

TEST_F(WorkerProcessTest, ExitCodeAndOutputFiles) {
  auto w = WorkerProcess::Start(Spec("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_GT((*w)->start_ticks(), 0u);
  WorkerExit e = WaitDone(**w);
  EXPECT_EQ(e.status, (ExitStatus{3, 0}));
  EXPECT_EQ(e.note, "");
  EXPECT_EQ(Slurp(dir_ + "/out"), "out\n");
  EXPECT_EQ(Slurp(dir_ + "/err"), "err\n");
  EXPECT_EQ(ReadExitFile(dir_ + "/exit")->exit_code, 3);
  // Later calls give the same answer.
  EXPECT_EQ((*w)->Wait(absl::ZeroDuration())->status, (ExitStatus{3, 0}));
}

TEST_F(WorkerProcessTest, MissingProgramExits127WithTheReasonOnStderr) {
  WorkerSpec s = Spec("");
  s.argv = {"no-such-program", "--flag"};
  auto w = WorkerProcess::Start(s);
  ASSERT_TRUE(w.ok()) << w.status();
  WorkerExit e = WaitDone(**w);
  EXPECT_EQ(e.status, (ExitStatus{127, 0}));
  EXPECT_THAT(Slurp(dir_ + "/err"), HasSubstr("cannot execute \"no-such-program\": No such file or "
                                              "directory (searched PATH \"/usr/bin:/bin\")"));
}

TEST_F(WorkerProcessTest, ScriptEntrypointIsExecutedDirectlyInItsDirectory) {
  std::ofstream(dir_ + "/train.sh") << "#!/bin/sh\necho \"cwd=$(pwd) args=$*\"\n";
  chmod((dir_ + "/train.sh").c_str(), 0755);
  WorkerSpec s = Spec("");
  s.argv = {"./train.sh", "a b", "$HOME;"};
  auto w = WorkerProcess::Start(s);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(WaitDone(**w).status, (ExitStatus{0, 0}));
  EXPECT_EQ(Slurp(dir_ + "/out"), absl::StrCat("cwd=", dir_, " args=a b $HOME;\n"));
}

TEST_F(WorkerProcessTest, RunAsRunsTheWorkerAsThatUserAndTheShimAsTheAgent) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root; this test runs as uid " << geteuid();
  // The exit file lies in a directory only the agent (root) may write; the worker's
  // directory is its own.
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  std::string work = dir_ + "/work";
  ASSERT_EQ(mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(chown(work.c_str(), 65534, 65534), 0);
  std::ofstream(dir_ + "/agent-secret") << "x";
  WorkerSpec s = Spec(
      "id -u; id -G; echo $PPID > ppid; cat ../agent-secret; kill -TERM $PPID; touch ../exit; "
      "exit 4");
  s.cwd = work;
  s.run_as = RunAs{65534, 65534};
  auto w = WorkerProcess::Start(s);
  ASSERT_TRUE(w.ok()) << w.status();
  WorkerExit e = WaitDone(**w);
  EXPECT_EQ(e.status, (ExitStatus{4, 0}));
  EXPECT_EQ(Slurp(dir_ + "/out"), "65534\n65534\n");
  std::string err = Slurp(dir_ + "/err");
  EXPECT_THAT(err, HasSubstr("../agent-secret: Permission denied"));
  EXPECT_THAT(err, HasSubstr("Operation not permitted"));  // the kill of the shim
  EXPECT_THAT(err, HasSubstr("touch: cannot touch '../exit': Permission denied"));
  // The shim (the worker's parent) kept the agent's user.
  pid_t shim = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(Slurp(work + "/ppid")), &shim));
  EXPECT_EQ(shim, (*w)->pid());
}

TEST_F(WorkerProcessTest, SigkilledWorkerIsReportedWithItsSignal) {
  auto w = WorkerProcess::Start(Spec("echo $$ > \"$DIR/pid\"; exec sleep 1000"));
  ASSERT_TRUE(w.ok()) << w.status();
  pid_t worker = WaitForPid("pid");
  ASSERT_GT(worker, 0);
  EXPECT_NE(worker, (*w)->pid());  // The shim waits for the worker.
  EXPECT_FALSE((*w)->Wait(absl::Milliseconds(50)).has_value());
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  EXPECT_EQ(WaitDone(**w).status, (ExitStatus{0, SIGKILL}));
}

TEST_F(WorkerProcessTest, SigtermToTheGroupIsRecordedByTheShimAndLeftoversAreSwept) {
  // The worker leaves a background child behind; it must not survive the worker.
  auto w =
      WorkerProcess::Start(Spec("sleep 1000 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; "
                                "trap 'exit 0' TERM; while true; do sleep 0.05; done"));
  ASSERT_TRUE(w.ok()) << w.status();
  pid_t child = WaitForPid("child");
  ASSERT_GT(WaitForPid("pid"), 0);
  ASSERT_GT(child, 0);
  ASSERT_TRUE((*w)->SignalGroup(SIGTERM).ok());
  WorkerExit e = WaitDone(**w);
  // The shell's trap exits 0 or SIGTERM hits it first; either way the shim recorded it.
  EXPECT_TRUE(e.status == (ExitStatus{0, 0}) || e.status == (ExitStatus{0, SIGTERM}))
      << e.status.ToString();
  EXPECT_TRUE(ReadExitFile(dir_ + "/exit").ok());
  // The sleep child got SIGTERM or was swept by SIGKILL; it is gone (it is not our child:
  // it was reparented, so kill(0) fails once it has been reaped).
  EXPECT_TRUE(WaitUntil(
      "the sleep child to be gone",
      [&] { return kill(child, 0) != 0 || !IsRunning(child, StartTicks(child).value_or(0)); },
      absl::Seconds(5)));
}

TEST_F(WorkerProcessTest, GroupSigkillKillsShimAndWorker) {
  auto w = WorkerProcess::Start(
      Spec("trap '' TERM; echo $$ > \"$DIR/pid\"; while true; do sleep 0.05; done"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_GT(WaitForPid("pid"), 0);
  ASSERT_TRUE((*w)->SignalGroup(SIGKILL).ok());
  WorkerExit e = WaitDone(**w);
  EXPECT_EQ(e.status, (ExitStatus{0, SIGKILL}));
}

// The agent process goes away: a new WorkerProcess adopts the running shim by pid and
// start time and learns its exit from the exit file.
TEST_F(WorkerProcessTest, AdoptedWorkerIsWatchedToItsEnd) {
  WorkerSpec spec =
      Spec("echo $$ > \"$DIR/pid\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.05; done; exit 5");
  pid_t shim = 0;
  uint64_t ticks = 0;
  {
    auto w = WorkerProcess::Start(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    shim = (*w)->pid();
    ticks = (*w)->start_ticks();
  }  // Destroyed without waiting: the worker keeps running.
  ASSERT_GT(WaitForPid("pid"), 0);
  EXPECT_TRUE(IsRunning(shim, ticks));
  // A different start time is a different process.
  EXPECT_FALSE(IsRunning(shim, ticks + 1));

  auto adopted = WorkerProcess::Adopt(shim, ticks, spec.exit_path);
  EXPECT_FALSE(adopted->Wait(absl::Milliseconds(50)).has_value());
  std::ofstream(dir_ + "/go") << "";
  WorkerExit e = WaitDone(*adopted);
  EXPECT_EQ(e.status, (ExitStatus{5, 0}));
  EXPECT_EQ(e.note, "");
}

TEST_F(WorkerProcessTest, AdoptingAGoneProcessGivesItsRecordedExitOrSaysUnknown) {
  ASSERT_TRUE(WriteExitFile(dir_ + "/exit", {0, SIGSEGV}).ok());
  auto gone = WorkerProcess::Adopt(999999999, 1, dir_ + "/exit");
  auto e = gone->Wait(absl::ZeroDuration());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, (ExitStatus{0, SIGSEGV}));

  // Our own pid, but started at another time: not the recorded process.
  auto reused = WorkerProcess::Adopt(getpid(), 1, dir_ + "/no-exit-file");
  e = reused->Wait(absl::ZeroDuration());
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status.signal, SIGKILL);
  EXPECT_THAT(e->note, HasSubstr("exit status unknown"));
  EXPECT_TRUE(reused->SignalGroup(SIGTERM).ok());  // Not sent: not our process.
}

TEST(Shim, BadArgumentsAndExitFileFormat) {
  EXPECT_EQ(RunWorkerShim({"only-exit-file"}), 2);
  EXPECT_EQ(RunWorkerShim({"f", "x", "prog"}), 2);
  EXPECT_EQ(ShimArgv("/bin/det-agent", "/e", {"a", "b"}),
            (std::vector<std::string>{"/bin/det-agent", "--worker-shim", "/e", "--", "a", "b"}));
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/bad-exit";
  std::ofstream(path) << "exit_code=x";
  EXPECT_TRUE(absl::IsDataLoss(ReadExitFile(path).status()));
}

}  // namespace
}  // namespace det::agent
