#include "common/process/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

extern char** environ;

namespace det {
namespace {

constexpr char kDefaultPath[] = "/bin:/usr/bin";

int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

timespec ToTimespec(int64_t ns) {
  timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  return ts;
}

// Closes `fd` if >= 0 (never retried: a failed close(2) has released the fd anyway).
void CloseFd(int fd) {
  if (fd >= 0) close(fd);
}

// Owns one file descriptor.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    Reset(other.Release());
    return *this;
  }
  ~ScopedFd() { CloseFd(fd_); }

  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) { CloseFd(std::exchange(fd_, fd)); }

 private:
  int fd_ = -1;
};

// Makes sure `fd` (close-on-exec) is not 0, 1 or 2, so that the child's dup2() onto the
// standard descriptors cannot clobber it (possible when the caller has closed its stdio).
absl::StatusOr<ScopedFd> AboveStdio(ScopedFd fd) {
  if (fd.get() > STDERR_FILENO) return fd;
  int moved = fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return absl::ErrnoToStatus(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return ScopedFd(moved);
}

struct Pipe {
  ScopedFd read_end;
  ScopedFd write_end;
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  Pipe pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
  ASSIGN_OR_RETURN(pipe.read_end, AboveStdio(std::move(pipe.read_end)));
  ASSIGN_OR_RETURN(pipe.write_end, AboveStdio(std::move(pipe.write_end)));
  return pipe;
}

absl::StatusOr<ScopedFd> OpenForChild(const std::string& path, int flags, mode_t mode,
                                      const char* what, const std::string& program) {
  ScopedFd fd(open(path.c_str(), flags | O_CLOEXEC, mode));
  if (fd.get() < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot open ", what, " \"", path, "\" for \"", program, "\""));
  }
  return AboveStdio(std::move(fd));
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

absl::Status Validate(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("SpawnOptions.argv must name a program");
  }
  for (const std::string& arg : options.argv) {
    if (HasNul(arg)) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument of \"", options.argv[0], "\" contains a NUL byte"));
    }
  }
  std::set<std::string_view> names;
  for (const auto& [name, value] : options.env) {
    if (name.empty() || name.find('=') != std::string::npos || HasNul(name) ||
        HasNul(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid environment variable \"", name, "\""));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable \"", name, "\" given twice"));
    }
  }
  if (HasNul(options.cwd)) return absl::InvalidArgumentError("cwd contains a NUL byte");
  if (options.stdout_mode == SpawnOptions::Output::kFile && options.stdout_path.empty()) {
    return absl::InvalidArgumentError("stdout_mode is kFile but stdout_path is empty");
  }
  if (options.stderr_mode == SpawnOptions::Output::kFile && options.stderr_path.empty()) {
    return absl::InvalidArgumentError("stderr_mode is kFile but stderr_path is empty");
  }
  return absl::OkStatus();
}

// What the child failed at; sent with errno through the report pipe.
enum class ChildStage : int32_t {
  kStdin = 1,
  kStdout,
  kStderr,
  kSession,
  kGroup,
  kChdir,
  kUser,
  kExec,
};

struct ChildFailure {
  int32_t stage;
  int32_t error;
};

// Everything the child needs, prepared before fork() so that the child only makes
// async-signal-safe calls.
struct ExecPlan {
  std::vector<std::string> candidates;  // paths to execve(), in order
  std::string searched_path;            // PATH that produced them; empty if not searched
  std::vector<std::string> arg_storage;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  const char* cwd = nullptr;
  int stdin_fd = -1;
  int stdout_fd = -1;  // -1: inherit
  int stderr_fd = -1;  // -1: inherit
  bool new_session = false;
  std::optional<RunAs> run_as;
  int report_fd = -1;
  int max_fd = 0;  // for closing descriptors where close_range() is missing
};

void PlanProgram(const SpawnOptions& options, ExecPlan& plan) {
  const std::string& program = options.argv[0];
  if (program.find('/') != std::string::npos) {
    plan.candidates.push_back(program);
    return;
  }
  plan.searched_path = kDefaultPath;
  for (const auto& [name, value] : options.env) {
    if (name == "PATH") plan.searched_path = value;
  }
  std::string_view rest = plan.searched_path;
  while (true) {
    size_t colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    plan.candidates.push_back(absl::StrCat(dir.empty() ? "." : std::string(dir), "/", program));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
}

void PlanArguments(const SpawnOptions& options, ExecPlan& plan) {
  plan.arg_storage = options.argv;
  for (std::string& arg : plan.arg_storage) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  for (const auto& [name, value] : options.env) {
    plan.env_storage.push_back(absl::StrCat(name, "=", value));
  }
  for (std::string& entry : plan.env_storage) plan.envp.push_back(entry.data());
  plan.envp.push_back(nullptr);
  if (!options.cwd.empty()) plan.cwd = options.cwd.c_str();
  plan.new_session = options.new_session;
  plan.run_as = options.run_as;
  rlimit limit;
  plan.max_fd = 1024;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  }
}

// Child side, between fork() and exec: async-signal-safe calls only.
[[noreturn]] void ChildFail(int report_fd, ChildStage stage, int error) {
  ChildFailure failure{static_cast<int32_t>(stage), error};
  while (write(report_fd, &failure, sizeof(failure)) < 0 && errno == EINTR) {
  }
  _exit(127);
}

[[noreturn]] void RunChild(const ExecPlan& plan) {
  const int report = plan.report_fd;
  if (plan.new_session ? setsid() < 0 : setpgid(0, 0) != 0) {
    ChildFail(report, plan.new_session ? ChildStage::kSession : ChildStage::kGroup, errno);
  }
  if (dup2(plan.stdin_fd, STDIN_FILENO) < 0) ChildFail(report, ChildStage::kStdin, errno);
  if (plan.stdout_fd >= 0 && dup2(plan.stdout_fd, STDOUT_FILENO) < 0) {
    ChildFail(report, ChildStage::kStdout, errno);
  }
  if (plan.stderr_fd >= 0 && dup2(plan.stderr_fd, STDERR_FILENO) < 0) {
    ChildFail(report, ChildStage::kStderr, errno);
  }
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    ChildFail(report, ChildStage::kChdir, errno);
  }
  if (plan.run_as.has_value()) {
    if (int error = SwitchToUser(*plan.run_as); error != 0) {
      ChildFail(report, ChildStage::kUser, error);
    }
  }
  // Everything above 2 closes at exec (the report pipe included, which tells the parent
  // that exec succeeded).
  if (close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = STDERR_FILENO + 1; fd < plan.max_fd; ++fd) {
      if (fd != report) close(fd);
    }
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action;
    if (sigaction(sig, nullptr, &action) != 0 || action.sa_handler == SIG_DFL) continue;
    memset(&action, 0, sizeof(action));
    action.sa_handler = SIG_DFL;
    sigaction(sig, &action, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  int error = ENOENT;
  bool denied = false;
  for (const std::string& candidate : plan.candidates) {
    execve(candidate.c_str(), plan.argv.data(), plan.envp.data());
    error = errno;
    if (error == EACCES) {
      denied = true;
    } else if (error != ENOENT && error != ENOTDIR && error != ESTALE && error != ENODEV &&
               error != ETIMEDOUT) {
      break;
    }
  }
  ChildFail(report, ChildStage::kExec, denied && error != ENOEXEC ? EACCES : error);
}

absl::Status DescribeChildFailure(const ChildFailure& failure, const SpawnOptions& options,
                                  const ExecPlan& plan) {
  const std::string program = absl::StrCat("\"", options.argv[0], "\"");
  std::string what;
  switch (static_cast<ChildStage>(failure.stage)) {
    case ChildStage::kStdin:
      what = absl::StrCat("cannot redirect stdin of ", program);
      break;
    case ChildStage::kStdout:
      what = absl::StrCat("cannot redirect stdout of ", program);
      break;
    case ChildStage::kStderr:
      what = absl::StrCat("cannot redirect stderr of ", program);
      break;
    case ChildStage::kSession:
      what = absl::StrCat("setsid() failed for ", program);
      break;
    case ChildStage::kGroup:
      what = absl::StrCat("setpgid() failed for ", program);
      break;
    case ChildStage::kChdir:
      what = absl::StrCat("cannot change to directory \"", options.cwd, "\" for ", program);
      break;
    case ChildStage::kUser:
      what = absl::StrCat("cannot switch to uid ", plan.run_as->uid, " gid ", plan.run_as->gid,
                          " for ", program);
      break;
    case ChildStage::kExec:
      what = absl::StrCat("cannot execute ", program);
      if (!plan.searched_path.empty()) {
        absl::StrAppend(&what, " (searched PATH \"", plan.searched_path, "\")");
      }
      break;
    default:
      return absl::InternalError(absl::StrCat("child for ", program,
                                              " reported unknown stage ", failure.stage));
  }
  return absl::ErrnoToStatus(failure.error, what);
}

// Reads the child's report: OK once exec closed the pipe, else the failure.
absl::StatusOr<std::optional<ChildFailure>> ReadChildReport(int fd) {
  ChildFailure failure;
  size_t got = 0;
  while (got < sizeof(failure)) {
    ssize_t n = read(fd, reinterpret_cast<char*>(&failure) + got, sizeof(failure) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "reading the child's exec report");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return std::nullopt;
  if (got != sizeof(failure)) return absl::InternalError("truncated exec report from child");
  return failure;
}

pid_t WaitPidRetrying(pid_t pid, int* status) {
  pid_t rc;
  do {
    rc = waitpid(pid, status, 0);
  } while (rc < 0 && errno == EINTR);
  return rc;
}

ExitStatus FromWaitStatus(int status) {
  ExitStatus result;
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

ExitStatus FromSiginfo(const siginfo_t& info) {
  ExitStatus result;
  if (info.si_code == CLD_EXITED) {
    result.exit_code = info.si_status;
  } else {
    result.signal = info.si_status;
  }
  return result;
}

}  // namespace

int SwitchToUser(const RunAs& user) {
  // Raw system calls: glibc's wrappers would signal the (absent) other threads of a forked
  // child to switch them too; and each call must affect only this process.
  if (syscall(SYS_setgroups, 1, &user.gid) != 0) return errno;
  if (syscall(SYS_setresgid, user.gid, user.gid, user.gid) != 0) return errno;
  if (syscall(SYS_setresuid, user.uid, user.uid, user.uid) != 0) return errno;
  return 0;
}

std::string ExitStatus::ToString() const {
  if (signal == 0) return absl::StrCat("exit code ", exit_code);
  const char* name = sigabbrev_np(signal);
  if (name == nullptr) return absl::StrCat("killed by signal ", signal);
  return absl::StrCat("killed by signal ", signal, " (SIG", name, ")");
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(const SpawnOptions& options) {
  RETURN_IF_ERROR(Validate(options));
  const std::string& program = options.argv[0];
  ExecPlan plan;
  PlanProgram(options, plan);
  PlanArguments(options, plan);

  ASSIGN_OR_RETURN(ScopedFd null_in,
                   OpenForChild("/dev/null", O_RDONLY, 0, "stdin", program));
  plan.stdin_fd = null_in.get();

  // Child ends of stdout/stderr, and the parent's pipe read ends.
  ScopedFd child_out[2];
  ScopedFd parent_out[2];
  const SpawnOptions::Output modes[2] = {options.stdout_mode, options.stderr_mode};
  const std::string* paths[2] = {&options.stdout_path, &options.stderr_path};
  const char* names[2] = {"stdout file", "stderr file"};
  for (int i = 0; i < 2; ++i) {
    switch (modes[i]) {
      case SpawnOptions::Output::kPipe: {
        ASSIGN_OR_RETURN(Pipe pipe, MakePipe());
        parent_out[i] = std::move(pipe.read_end);
        child_out[i] = std::move(pipe.write_end);
        break;
      }
      case SpawnOptions::Output::kFile: {
        ASSIGN_OR_RETURN(child_out[i], OpenForChild(*paths[i], O_WRONLY | O_CREAT | O_APPEND,
                                                    0644, names[i], program));
        break;
      }
      case SpawnOptions::Output::kNull: {
        ASSIGN_OR_RETURN(child_out[i],
                         OpenForChild("/dev/null", O_WRONLY, 0, "output", program));
        break;
      }
      case SpawnOptions::Output::kInherit:
        break;
    }
  }
  plan.stdout_fd = child_out[0].get();
  plan.stderr_fd = child_out[1].get();

  ASSIGN_OR_RETURN(Pipe report, MakePipe());
  plan.report_fd = report.write_end.get();

  // Block every signal across fork() so that no handler of ours runs in the child before
  // it resets the dispositions.
  sigset_t all;
  sigset_t saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    return absl::ErrnoToStatus(fork_errno, absl::StrCat("fork() for \"", program, "\""));
  }

  // Close the child's ends here, so that reads see EOF once the child is done with them.
  report.write_end.Reset();
  null_in.Reset();
  child_out[0].Reset();
  child_out[1].Reset();

  absl::StatusOr<std::optional<ChildFailure>> failure = ReadChildReport(report.read_end.get());
  if (!failure.ok() || failure->has_value()) {
    int ignored;
    if (!failure.ok()) kill(pid, SIGKILL);
    WaitPidRetrying(pid, &ignored);
    if (!failure.ok()) return failure.status();
    return DescribeChildFailure(**failure, options, plan);
  }

  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // close-on-exec
  return std::unique_ptr<Subprocess>(
      new Subprocess(pid, pidfd < 0 ? -1 : pidfd, parent_out[0].Release(),
                     parent_out[1].Release()));
}

Subprocess::Subprocess(pid_t pid, int pidfd, int stdout_fd, int stderr_fd)
    : pid_(pid), pidfd_(pidfd), stdout_fd_(stdout_fd), stderr_fd_(stderr_fd) {}

Subprocess::~Subprocess() {
  bool kill_and_reap;
  {
    absl::MutexLock lock(&mu_);
    kill_and_reap = !detached_ && !reaped_;
  }
  if (kill_and_reap) {
    if (kill(-pid_, SIGKILL) != 0) kill(pid_, SIGKILL);
    int ignored;
    WaitPidRetrying(pid_, &ignored);
  }
  CloseFd(pidfd_);
  CloseFd(stdout_fd_);
  CloseFd(stderr_fd_);
}

absl::Status Subprocess::SignalGroup(int sig) {
  absl::MutexLock lock(&mu_);
  if (reaped_) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", pid_, " has already been reaped"));
  }
  if (kill(-pid_, sig) == 0) return absl::OkStatus();
  if (errno == ESRCH && kill(pid_, sig) == 0) return absl::OkStatus();
  return absl::ErrnoToStatus(errno, absl::StrCat("cannot send signal ", sig,
                                                 " to process group ", pid_));
}

absl::StatusOr<std::optional<ExitStatus>> Subprocess::AwaitExit(int64_t deadline_ns) {
  int64_t backoff_ns = 1000000;  // polling fallback without a pidfd: 1 ms doubling to 50
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (exit_status_.has_value()) return exit_status_;
    }
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    int flags = WEXITED | WNOWAIT | (deadline_ns < 0 ? 0 : WNOHANG);
    if (waitid(P_PID, pid_, &info, flags) != 0) {
      if (errno == EINTR) continue;
      int error = errno;
      absl::MutexLock lock(&mu_);
      // Reaped by Terminate() on another thread meanwhile.
      if (exit_status_.has_value()) return exit_status_;
      return absl::ErrnoToStatus(error, absl::StrCat("waitid(", pid_, ")"));
    }
    if (info.si_pid == pid_) {
      absl::MutexLock lock(&mu_);
      if (!exit_status_.has_value()) exit_status_ = FromSiginfo(info);
      return exit_status_;
    }
    if (deadline_ns < 0) continue;
    int64_t remaining = deadline_ns - MonotonicNowNs();
    if (remaining <= 0) return std::optional<ExitStatus>();
    if (pidfd_ >= 0) {
      pollfd poll_fd{pidfd_, POLLIN, 0};
      timespec timeout = ToTimespec(remaining);
      ppoll(&poll_fd, 1, &timeout, nullptr);
    } else {
      timespec pause = ToTimespec(std::min(remaining, backoff_ns));
      nanosleep(&pause, nullptr);
      backoff_ns = std::min<int64_t>(backoff_ns * 2, 50000000);
    }
  }
}

absl::StatusOr<ExitStatus> Subprocess::Reap() {
  absl::MutexLock lock(&mu_);
  if (reaped_) return *exit_status_;
  int status;
  if (WaitPidRetrying(pid_, &status) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("waitpid(", pid_, ")"));
  }
  if (!exit_status_.has_value()) exit_status_ = FromWaitStatus(status);
  reaped_ = true;
  return *exit_status_;
}

std::optional<ExitStatus> Subprocess::TryWait() {
  absl::StatusOr<std::optional<ExitStatus>> status = AwaitExit(/*deadline_ns=*/0);
  if (!status.ok()) return std::nullopt;
  return *status;
}

absl::StatusOr<ExitStatus> Subprocess::Wait() {
  ASSIGN_OR_RETURN(std::optional<ExitStatus> status, AwaitExit(/*deadline_ns=*/-1));
  return *status;
}

absl::StatusOr<ExitStatus> Subprocess::WaitFor(absl::Duration timeout) {
  int64_t deadline = MonotonicNowNs() + std::max<int64_t>(absl::ToInt64Nanoseconds(timeout), 0);
  ASSIGN_OR_RETURN(std::optional<ExitStatus> status, AwaitExit(deadline));
  if (!status.has_value()) {
    return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " still running after ",
                                                    absl::FormatDuration(timeout)));
  }
  return *status;
}

absl::StatusOr<ExitStatus> Subprocess::Terminate(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (reaped_) return *exit_status_;
  }
  // A group that is already gone or a child reaped meanwhile is fine; anything else
  // would leave a process behind.
  auto signal_group = [this](int sig) {
    absl::Status status = SignalGroup(sig);
    if (absl::IsNotFound(status) || absl::IsFailedPrecondition(status)) {
      return absl::OkStatus();
    }
    return status;
  };
  RETURN_IF_ERROR(signal_group(SIGTERM));
  absl::StatusOr<ExitStatus> exited = WaitFor(grace);
  if (!exited.ok() && !absl::IsDeadlineExceeded(exited.status())) return exited.status();
  RETURN_IF_ERROR(signal_group(SIGKILL));
  return Reap();
}

void Subprocess::Detach() {
  absl::MutexLock lock(&mu_);
  detached_ = true;
}

EnvironmentVariables CurrentEnvironment() {
  EnvironmentVariables result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    result.emplace_back(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return result;
}

EnvironmentVariables MergeEnvironment(EnvironmentVariables base,
                                      const EnvironmentVariables& overrides) {
  for (const auto& [name, value] : overrides) {
    // A structured binding cannot be captured by a lambda before C++20 (Clang refuses it).
    const std::string& key = name;
    auto it = std::find_if(base.begin(), base.end(),
                           [&key](const auto& entry) { return entry.first == key; });
    if (it != base.end()) {
      it->second = value;
    } else {
      base.emplace_back(name, value);
    }
  }
  return base;
}

}  // namespace det
