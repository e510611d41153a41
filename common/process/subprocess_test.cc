#include "common/process/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process/line_reader.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::det::testing::WaitUntil;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Output = SpawnOptions::Output;

constexpr absl::Duration kPatience = absl::Seconds(30);
const EnvironmentVariables kPathOnly = {{"PATH", "/usr/bin:/bin"}};

// A fresh directory under the test's temporary directory.
std::string MakeTempDir() {
  const char* root = getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(root != nullptr ? root : "/tmp", "/subprocess_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr) << strerror(errno);
  return pattern;
}

void WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path) << content;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << strerror(errno);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Dead: no such process, or a zombie waiting for whoever inherited it.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

SpawnOptions Shell(const std::string& script, std::vector<std::string> args = {}) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script, "sh"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = kPathOnly;
  return options;
}

std::unique_ptr<Subprocess> SpawnOrDie(const SpawnOptions& options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  EXPECT_TRUE(process.ok()) << process.status();
  return process.ok() ? std::move(*process) : nullptr;
}

struct Captured {
  std::vector<std::string> out;
  std::vector<std::string> err;
};

// Reads both pipes of `process` to EOF, concurrently, split into lines.
Captured Drain(Subprocess& process) {
  Captured captured;
  LineSplitter splitters[2];
  std::vector<std::string>* sinks[2] = {&captured.out, &captured.err};
  int fds[2] = {process.stdout_fd(), process.stderr_fd()};
  const absl::Time deadline = absl::Now() + kPatience;
  char buffer[65536];
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd polled[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (timeout_ms <= 0) {
      ADD_FAILURE() << "output still open after " << kPatience;
      break;
    }
    if (poll(polled, 2, timeout_ms) < 0 && errno != EINTR) {
      ADD_FAILURE() << "poll: " << strerror(errno);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || polled[i].revents == 0) continue;
      ssize_t n = read(fds[i], buffer, sizeof(buffer));
      auto collect = [&](std::string_view line) { sinks[i]->emplace_back(line); };
      if (n > 0) {
        splitters[i].Feed(std::string_view(buffer, static_cast<size_t>(n)), collect);
      } else if (n == 0 || errno != EINTR) {
        splitters[i].Flush(collect);
        fds[i] = -1;
      }
    }
  }
  return captured;
}

TEST(ExitStatusTest, ToString) {
  EXPECT_EQ((ExitStatus{3, 0}).ToString(), "exit code 3");
  EXPECT_EQ((ExitStatus{0, SIGKILL}).ToString(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ((ExitStatus{0, SIGTERM}).ToString(), "killed by signal 15 (SIGTERM)");
  EXPECT_TRUE((ExitStatus{0, 0}).ok());
  EXPECT_FALSE((ExitStatus{1, 0}).ok());
  EXPECT_FALSE((ExitStatus{0, SIGKILL}).ok());
}

TEST(SubprocessTest, ReportsExitCode) {
  auto process = SpawnOrDie(Shell("exit 3"));
  ASSERT_NE(process, nullptr);
  absl::StatusOr<ExitStatus> status = process->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, (ExitStatus{3, 0}));
  EXPECT_EQ(status->ToString(), "exit code 3");
}

TEST(SubprocessTest, ReportsSignal) {
  auto process = SpawnOrDie(Shell("kill -KILL $$"));
  ASSERT_NE(process, nullptr);
  absl::StatusOr<ExitStatus> status = process->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, (ExitStatus{0, SIGKILL}));
  EXPECT_EQ(status->ToString(), "killed by signal 9 (SIGKILL)");
}

TEST(SubprocessTest, RunsAsAnotherUserWithOnlyItsGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root; this test runs as uid " << geteuid();
  SpawnOptions options = Shell("id -u; id -g; id -G; cat /proc/self/status | grep ^CapEff");
  options.run_as = RunAs{65534, 65533};
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  Captured captured = Drain(*process);
  EXPECT_EQ(captured.out, (std::vector<std::string>{"65534", "65533", "65533",
                                                    "CapEff:\t0000000000000000"}));
  EXPECT_TRUE(process->Wait()->ok());
}

TEST(SubprocessTest, EntersCwdAndOpensOutputBeforeSwitchingUser) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root; this test runs as uid " << geteuid();
  std::string dir = MakeTempDir();
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  SpawnOptions options = Shell("pwd; cat secret; id -u");
  options.cwd = dir;
  WriteFile(dir + "/secret", "root only\n", 0600);
  options.stdout_mode = SpawnOptions::Output::kFile;
  options.stdout_path = dir + "/out";
  options.stderr_mode = SpawnOptions::Output::kFile;
  options.stderr_path = dir + "/out";
  options.run_as = RunAs{65534, 65534};
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(process->Wait().ok());
  std::string out = ReadFile(dir + "/out");
  EXPECT_NE(out.find(dir + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("secret: Permission denied"), std::string::npos) << out;
  EXPECT_NE(out.find("65534\n"), std::string::npos) << out;
}

TEST(SubprocessTest, ReportsAUserSwitchThatIsRefused) {
  if (geteuid() == 0) GTEST_SKIP() << "as root every switch succeeds";
  SpawnOptions options = Shell("true");
  options.run_as = RunAs{geteuid() + 1, getegid() + 1};
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  ASSERT_FALSE(process.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(process.status())) << process.status();
  EXPECT_NE(process.status().message().find("cannot switch to uid"), std::string::npos)
      << process.status();
}

TEST(SubprocessTest, CapturesStdoutAndStderrAsLines) {
  auto process =
      SpawnOrDie(Shell("printf 'one\\ntwo\\r\\nthree'; printf 'e1\\n\\ne2\\n' >&2; exit 0"));
  ASSERT_NE(process, nullptr);
  Captured captured = Drain(*process);
  EXPECT_THAT(captured.out, ElementsAre("one", "two", "three"));
  EXPECT_THAT(captured.err, ElementsAre("e1", "", "e2"));
  EXPECT_TRUE(process->Wait()->ok());
}

TEST(SubprocessTest, CapturesLargeOutputOnBothPipes) {
  auto process = SpawnOrDie(
      Shell("yes out | head -n 100000; yes err | head -n 100000 >&2; echo last"));
  ASSERT_NE(process, nullptr);
  Captured captured = Drain(*process);
  ASSERT_EQ(captured.out.size(), 100001u);
  ASSERT_EQ(captured.err.size(), 100000u);
  EXPECT_EQ(captured.out.front(), "out");
  EXPECT_EQ(captured.out.back(), "last");
  EXPECT_EQ(captured.err.back(), "err");
  EXPECT_TRUE(process->Wait()->ok());
}

TEST(SubprocessTest, PassesExactlyTheGivenEnvironment) {
  SpawnOptions options;
  options.argv = {"/usr/bin/env"};
  options.env = {{"DET_FOO", "bar baz"}, {"DET_EMPTY", ""}, {"DET_EQ", "a=b"}};
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre("DET_FOO=bar baz", "DET_EMPTY=", "DET_EQ=a=b"));
  EXPECT_TRUE(process->Wait()->ok());
}

TEST(SubprocessTest, EmptyEnvironment) {
  SpawnOptions options;
  options.argv = {"/usr/bin/env"};
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, IsEmpty());
}

TEST(SubprocessTest, ResolvesProgramWithPathFromChildEnvironment) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/det-hello", "#!/bin/sh\necho hello \"$1\"\n", 0755);
  SpawnOptions options;
  options.argv = {"det-hello", "world"};
  options.env = {{"PATH", absl::StrCat("/nonexistent:", dir, ":/usr/bin:/bin")}};
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre("hello world"));
  EXPECT_TRUE(process->Wait()->ok());

  // Without PATH in the child's environment, only the default path is searched.
  options.env = {};
  absl::StatusOr<std::unique_ptr<Subprocess>> missing = Subprocess::Spawn(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

TEST(SubprocessTest, HonoursWorkingDirectory) {
  const std::string dir = MakeTempDir();
  char resolved[PATH_MAX];
  ASSERT_NE(realpath(dir.c_str(), resolved), nullptr);
  SpawnOptions options = Shell("pwd -P");
  options.cwd = dir;
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre(std::string(resolved)));
}

TEST(SubprocessTest, MissingBinaryIsNotFoundAndNamed) {
  SpawnOptions options;
  options.argv = {"det-no-such-binary", "--flag"};
  options.env = kPathOnly;
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  EXPECT_EQ(process.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(process.status().message(), HasSubstr("\"det-no-such-binary\""));
  EXPECT_THAT(process.status().message(), HasSubstr("/usr/bin:/bin"));
  EXPECT_THAT(process.status().message(), HasSubstr(strerror(ENOENT)));

  options.argv = {"/nonexistent/det-tool"};
  process = Subprocess::Spawn(options);
  EXPECT_EQ(process.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(process.status().message(), HasSubstr("/nonexistent/det-tool"));
}

TEST(SubprocessTest, NonExecutableFileIsPermissionDenied) {
  const std::string path = MakeTempDir() + "/not-executable";
  WriteFile(path, "#!/bin/sh\nexit 0\n", 0644);
  SpawnOptions options;
  options.argv = {path};
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  EXPECT_EQ(process.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(process.status().message(), HasSubstr(path));
  EXPECT_THAT(process.status().message(), HasSubstr(strerror(EACCES)));
}

TEST(SubprocessTest, BadExecutableFormatIsAnErrorNotAShell) {
  const std::string path = MakeTempDir() + "/garbage";
  WriteFile(path, "echo this must not run through a shell\n", 0755);
  SpawnOptions options;
  options.argv = {path};
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  EXPECT_FALSE(process.ok());
  EXPECT_THAT(process.status().message(), HasSubstr(path));
  EXPECT_THAT(process.status().message(), HasSubstr(strerror(ENOEXEC)));
}

TEST(SubprocessTest, BadWorkingDirectoryIsNotFoundAndNamed) {
  const std::string dir = MakeTempDir() + "/missing";
  SpawnOptions options = Shell("exit 0");
  options.cwd = dir;
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(options);
  EXPECT_EQ(process.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(process.status().message(), HasSubstr(dir));
  EXPECT_THAT(process.status().message(), HasSubstr("/bin/sh"));
}

TEST(SubprocessTest, RejectsInvalidOptions) {
  SpawnOptions options;
  EXPECT_EQ(Subprocess::Spawn(options).status().code(), absl::StatusCode::kInvalidArgument);

  options = Shell("exit 0");
  options.env = {{"A=B", "c"}};
  EXPECT_EQ(Subprocess::Spawn(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.env = {{"A", "1"}, {"A", "2"}};
  absl::Status duplicate = Subprocess::Spawn(options).status();
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate.message(), HasSubstr("\"A\""));

  options = Shell("exit 0");
  options.stdout_mode = Output::kFile;
  EXPECT_EQ(Subprocess::Spawn(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, UnopenableOutputFileIsNamed) {
  SpawnOptions options = Shell("exit 0");
  options.stderr_mode = Output::kFile;
  options.stderr_path = "/nonexistent/dir/err.log";
  absl::Status status = Subprocess::Spawn(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/dir/err.log"));
}

TEST(SubprocessTest, FileOutputAppends) {
  const std::string dir = MakeTempDir();
  const std::string log = dir + "/both.log";
  WriteFile(log, "existing\n");
  SpawnOptions options = Shell("echo out; echo err >&2");
  options.stdout_mode = Output::kFile;
  options.stdout_path = log;
  options.stderr_mode = Output::kFile;
  options.stderr_path = log;
  for (int i = 0; i < 2; ++i) {
    auto process = SpawnOrDie(options);
    ASSERT_NE(process, nullptr);
    EXPECT_EQ(process->stdout_fd(), -1);
    EXPECT_EQ(process->stderr_fd(), -1);
    EXPECT_TRUE(process->Wait()->ok());
  }
  EXPECT_EQ(ReadFile(log), "existing\nout\nerr\nout\nerr\n");

  // A new file is created with mode 0644 (less the umask).
  options.stdout_path = dir + "/new.log";
  options.stderr_mode = Output::kNull;
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_TRUE(process->Wait()->ok());
  EXPECT_EQ(ReadFile(options.stdout_path), "out\n");
  mode_t mask = umask(0);
  umask(mask);
  struct stat st;
  ASSERT_EQ(stat(options.stdout_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644 & ~mask);
}

TEST(SubprocessTest, StdinIsDevNull) {
  auto process = SpawnOrDie(Shell("cat; echo done"));
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre("done"));
}

TEST(SubprocessTest, ClosesInheritableDescriptors) {
  int base = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(base, 0);
  int leaked = fcntl(base, F_DUPFD, 50);
  ASSERT_GE(leaked, 50);
  auto process = SpawnOrDie(Shell(
      absl::StrCat("[ -e /proc/self/fd/", leaked, " ] && echo open || echo closed; "
                   "[ -e /proc/self/fd/", base, " ] && echo open || echo closed")));
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre("closed", "closed"));
  close(leaked);
  close(base);
}

TEST(SubprocessTest, ChildLeadsItsOwnProcessGroup) {
  auto process = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(getpgid(process->pid()), process->pid());
  EXPECT_EQ(getsid(process->pid()), getsid(0));

  SpawnOptions options = Shell("exec sleep 1000");
  options.new_session = true;
  auto daemon = SpawnOrDie(options);
  ASSERT_NE(daemon, nullptr);
  EXPECT_EQ(getpgid(daemon->pid()), daemon->pid());
  EXPECT_EQ(getsid(daemon->pid()), daemon->pid());
}

TEST(SubprocessTest, ResetsSignalDispositionsAndMask) {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction saved_action;
  ASSERT_EQ(sigaction(SIGUSR1, &ignore, &saved_action), 0);
  sigset_t block;
  sigset_t saved_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR2);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &saved_mask), 0);

  auto ignored = SpawnOrDie(Shell("kill -USR1 $$; exit 0"));
  auto blocked = SpawnOrDie(Shell("kill -USR2 $$; exit 0"));

  sigaction(SIGUSR1, &saved_action, nullptr);
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  ASSERT_NE(ignored, nullptr);
  ASSERT_NE(blocked, nullptr);
  EXPECT_EQ(*ignored->Wait(), (ExitStatus{0, SIGUSR1}));
  EXPECT_EQ(*blocked->Wait(), (ExitStatus{0, SIGUSR2}));
}

TEST(SubprocessTest, TryWaitAndWaitFor) {
  auto running = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(running, nullptr);
  EXPECT_FALSE(running->TryWait().has_value());
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> timed_out = running->WaitFor(absl::Milliseconds(100));
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded)
      << timed_out.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_FALSE(running->TryWait().has_value());

  auto exiting = SpawnOrDie(Shell("exit 5"));
  ASSERT_NE(exiting, nullptr);
  EXPECT_TRUE(WaitUntil(
      "the exit of `exit 5`", [&] { return exiting->TryWait().has_value(); }, kPatience));
  EXPECT_EQ(exiting->TryWait(), (ExitStatus{5, 0}));
  EXPECT_EQ(*exiting->WaitFor(absl::ZeroDuration()), (ExitStatus{5, 0}));
  EXPECT_EQ(*exiting->Wait(), (ExitStatus{5, 0}));

  auto quick = SpawnOrDie(Shell("exit 0"));
  ASSERT_NE(quick, nullptr);
  absl::StatusOr<ExitStatus> status = quick->WaitFor(kPatience);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->ok());
}

TEST(SubprocessTest, SignalGroupDeliversSignal) {
  auto process = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(process->SignalGroup(SIGUSR1).ok());
  EXPECT_EQ(*process->Wait(), (ExitStatus{0, SIGUSR1}));
  // Exited but not reaped: signalling the (now empty) group is still safe.
  EXPECT_TRUE(process->SignalGroup(0).ok());
  EXPECT_EQ(*process->Terminate(absl::Seconds(1)), (ExitStatus{0, SIGUSR1}));
  EXPECT_EQ(process->SignalGroup(SIGTERM).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SubprocessTest, TerminateStopsCooperativeProcessWithinGrace) {
  auto process = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(process, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> status = process->Terminate(kPatience);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, (ExitStatus{0, SIGTERM}));
  EXPECT_LT(absl::Now() - start, kPatience) << "Terminate waited out the grace";
  EXPECT_EQ(*process->Terminate(kPatience), (ExitStatus{0, SIGTERM}));  // idempotent
}

TEST(SubprocessTest, TerminateReturnsExitCodeOfHandledSigterm) {
  const std::string ready = MakeTempDir() + "/ready";
  auto process = SpawnOrDie(
      Shell("trap 'exit 7' TERM; : > \"$1\"; while :; do sleep 1; done", {ready}));
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(WaitUntil(
      "the ready file", [&] { return FileExists(ready); }, kPatience));
  EXPECT_EQ(*process->Terminate(kPatience), (ExitStatus{7, 0}));
}

TEST(SubprocessTest, TerminateKillsSigtermIgnoringGroupIncludingGrandchild) {
  const std::string pid_file = MakeTempDir() + "/grandchild.pid";
  auto process = SpawnOrDie(Shell(
      "trap '' TERM; sleep 1000 & echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"; wait",
      {pid_file}));
  ASSERT_NE(process, nullptr);
  ASSERT_TRUE(WaitUntil(
      "the grandchild pid file", [&] { return FileExists(pid_file); }, kPatience));
  const pid_t grandchild = std::stoi(ReadFile(pid_file));
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(getpgid(grandchild), process->pid());

  const pid_t pid = process->pid();
  const absl::Duration grace = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<ExitStatus> status = process->Terminate(grace);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, (ExitStatus{0, SIGKILL}));
  EXPECT_GE(absl::Now() - start, grace);

  EXPECT_EQ(kill(pid, 0), -1);  // reaped
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(WaitUntil(
      "the grandchild to be gone", [&] { return ProcessGone(grandchild); }, kPatience))
      << "grandchild " << grandchild << " survived";
}

TEST(SubprocessTest, TerminateSweepsGroupAfterChildExited) {
  const std::string pid_file = MakeTempDir() + "/orphan.pid";
  // The child exits at once, leaving a SIGTERM-ignoring grandchild in its group.
  auto process = SpawnOrDie(Shell(
      "trap '' TERM; sleep 1000 & echo $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"; exit 4",
      {pid_file}));
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(*process->Wait(), (ExitStatus{4, 0}));
  ASSERT_TRUE(FileExists(pid_file));
  const pid_t orphan = std::stoi(ReadFile(pid_file));
  EXPECT_FALSE(ProcessGone(orphan));
  EXPECT_EQ(*process->Terminate(absl::Milliseconds(100)), (ExitStatus{4, 0}));
  EXPECT_TRUE(WaitUntil(
      "the orphan to be gone", [&] { return ProcessGone(orphan); }, kPatience))
      << "orphan " << orphan;
}

TEST(SubprocessTest, WaitOnOneThreadTerminateOnAnother) {
  auto process = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(process, nullptr);
  absl::StatusOr<ExitStatus> waited;
  std::thread waiter([&] { waited = process->Wait(); });
  absl::StatusOr<ExitStatus> terminated = process->Terminate(kPatience);
  waiter.join();
  ASSERT_TRUE(terminated.ok()) << terminated.status();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(*terminated, (ExitStatus{0, SIGTERM}));
  EXPECT_EQ(*waited, (ExitStatus{0, SIGTERM}));
}

TEST(SubprocessTest, DestructorKillsAndReaps) {
  auto process = SpawnOrDie(Shell("exec sleep 1000"));
  ASSERT_NE(process, nullptr);
  const pid_t pid = process->pid();
  process.reset();
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(SubprocessTest, DetachedProcessOutlivesObject) {
  SpawnOptions options = Shell("exec sleep 1000");
  options.new_session = true;
  options.stdout_mode = Output::kNull;
  options.stderr_mode = Output::kNull;
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  const pid_t pid = process->pid();
  process->Detach();
  process.reset();
  EXPECT_EQ(kill(pid, 0), 0);
  // Clean up by hand: the test process is still its parent.
  kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
}

TEST(EnvironmentTest, CurrentEnvironmentAndMerge) {
  ASSERT_EQ(setenv("DET_SUBPROCESS_TEST", "x=y", 1), 0);
  EnvironmentVariables env = CurrentEnvironment();
  EXPECT_THAT(env, ::testing::Contains(std::make_pair(std::string("DET_SUBPROCESS_TEST"),
                                                    std::string("x=y"))));
  EnvironmentVariables merged =
      MergeEnvironment({{"A", "1"}, {"B", "2"}}, {{"B", "3"}, {"C", "4"}});
  EXPECT_EQ(merged, (EnvironmentVariables{{"A", "1"}, {"B", "3"}, {"C", "4"}}));
}

TEST(EnvironmentTest, InheritedEnvironmentReachesChild) {
  ASSERT_EQ(setenv("DET_SUBPROCESS_TEST", "inherited", 1), 0);
  SpawnOptions options = Shell("echo \"$DET_SUBPROCESS_TEST $DET_EXTRA\"");
  options.env = MergeEnvironment(CurrentEnvironment(), {{"DET_EXTRA", "added"}});
  auto process = SpawnOrDie(options);
  ASSERT_NE(process, nullptr);
  EXPECT_THAT(Drain(*process).out, ElementsAre("inherited added"));
}

}  // namespace
}  // namespace det
