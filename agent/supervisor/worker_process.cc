#include "agent/supervisor/worker_process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/supervisor/shim.h"

namespace det::agent {
namespace {

// /proc/PID/stat after the command name (which may contain spaces and parentheses).
absl::StatusOr<std::vector<std::string>> StatFields(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return absl::DataLossError(absl::StrCat("/proc/", pid, "/stat is malformed"));
  }
  // Field 3 (state) is the first after the name.
  return std::vector<std::string>(absl::StrSplit(text.substr(close + 1), ' ', absl::SkipEmpty()));
}

}  // namespace

absl::StatusOr<uint64_t> StartTicks(pid_t pid) {
  absl::StatusOr<std::vector<std::string>> f = StatFields(pid);
  if (!f.ok()) return f.status();
  uint64_t ticks = 0;
  // Field 22 is index 22 - 3 after the name.
  if (f->size() < 20 || !absl::SimpleAtoi((*f)[19], &ticks)) {
    return absl::DataLossError(absl::StrCat("/proc/", pid, "/stat has no start time"));
  }
  return ticks;
}

bool IsRunning(pid_t pid, uint64_t start_ticks) {
  absl::StatusOr<std::vector<std::string>> f = StatFields(pid);
  if (!f.ok() || f->size() < 20) return false;
  uint64_t ticks = 0;
  if (!absl::SimpleAtoi((*f)[19], &ticks) || ticks != start_ticks) return false;
  return (*f)[0] != "Z" && (*f)[0] != "X";
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(const WorkerSpec& spec) {
  SpawnOptions opts;
  opts.argv = ShimArgv(spec.shim_path, spec.exit_path, spec.argv, spec.run_as);
  opts.env = spec.env;
  opts.cwd = spec.cwd;
  opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
  opts.stdout_path = spec.stdout_path;
  opts.stderr_path = spec.stderr_path;
  unlink(spec.exit_path.c_str());
  absl::StatusOr<std::unique_ptr<Subprocess>> child = Subprocess::Spawn(opts);
  if (!child.ok()) return child.status();
  // Kept running if this object (or the agent) goes away; reaped in Wait().
  (*child)->Detach();
  pid_t pid = (*child)->pid();
  absl::StatusOr<uint64_t> ticks = StartTicks(pid);
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(pid, ticks.ok() ? *ticks : 0, spec.exit_path, std::move(*child), -1));
}

std::unique_ptr<WorkerProcess> WorkerProcess::Adopt(pid_t pid, uint64_t start_ticks,
                                                    const std::string& exit_path) {
  int pidfd = pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
  // Checked after opening the pidfd, so that the pidfd is known to refer to that process.
  if (!IsRunning(pid, start_ticks)) {
    if (pidfd >= 0) close(pidfd);
    auto w =
        std::unique_ptr<WorkerProcess>(new WorkerProcess(pid, start_ticks, exit_path, nullptr, -1));
    absl::MutexLock l(&w->mu_);
    w->exit_ = w->Finish(std::nullopt);
    return w;
  }
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(pid, start_ticks, exit_path, nullptr, pidfd));
}

WorkerProcess::WorkerProcess(pid_t pid, uint64_t start_ticks, std::string exit_path,
                             std::unique_ptr<Subprocess> child, int pidfd)
    : pid_(pid),
      start_ticks_(start_ticks),
      exit_path_(std::move(exit_path)),
      child_(std::move(child)),
      pidfd_(pidfd) {}

WorkerProcess::~WorkerProcess() {
  if (pidfd_ >= 0) close(pidfd_);
}

absl::Status WorkerProcess::SignalGroup(int sig) {
  {
    absl::MutexLock l(&mu_);
    if (exit_) return absl::OkStatus();
  }
  if (child_) {
    absl::Status st = child_->SignalGroup(sig);
    return absl::IsFailedPrecondition(st) ? absl::OkStatus() : st;
  }
  // Adopted: make sure the pid still is our shim (a reused pid must not be signalled).
  if (!IsRunning(pid_, start_ticks_)) return absl::OkStatus();
  if (kill(-pid_, sig) == 0 || errno == ESRCH) return absl::OkStatus();
  return absl::ErrnoToStatus(errno, absl::StrCat("cannot signal process group ", pid_));
}

std::optional<WorkerExit> WorkerProcess::Wait(absl::Duration timeout) {
  {
    absl::MutexLock l(&mu_);
    if (exit_) return exit_;
  }
  std::optional<ExitStatus> child_status;
  if (child_) {
    absl::StatusOr<ExitStatus> st = child_->WaitFor(timeout);
    if (!st.ok()) return std::nullopt;
    // Sweeps the group (the shim has exited; descendants may linger) and reaps the shim.
    absl::StatusOr<ExitStatus> reaped = child_->Terminate(absl::ZeroDuration());
    child_status = reaped.ok() ? *reaped : *st;
  } else {
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      int rc = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      if (rc == 0 || (rc < 0 && errno == EINTR)) return std::nullopt;
    } else if (IsRunning(pid_, start_ticks_)) {
      absl::SleepFor(std::min(timeout, absl::Milliseconds(100)));
      if (IsRunning(pid_, start_ticks_)) return std::nullopt;
    }
    // Not our child: sweep the group by its id. A group id is not reused while any member
    // of the group lives, and the shim has only just ended.
    kill(-pid_, SIGKILL);
  }
  absl::MutexLock l(&mu_);
  if (!exit_) exit_ = Finish(child_status);
  return exit_;
}

WorkerExit WorkerProcess::Finish(std::optional<ExitStatus> child_status) {
  WorkerExit exit;
  absl::StatusOr<ExitStatus> recorded = ReadExitFile(exit_path_);
  if (recorded.ok()) {
    exit.status = *recorded;
  } else if (child_status) {
    // The shim itself was killed (SIGKILL of the group); so was the worker.
    exit.status = *child_status;
    if (exit.status.signal == 0) {
      exit.note = absl::StrCat("its shim exited without recording the worker's status");
    }
  } else {
    exit.status.signal = SIGKILL;
    exit.note = "exit status unknown: the worker and its shim ended while no agent watched";
  }
  return exit;
}

absl::StatusOr<std::unique_ptr<Process>> ShimProcessLauncher::Start(const WorkerSpec& spec) {
  absl::StatusOr<std::unique_ptr<WorkerProcess>> started = WorkerProcess::Start(spec);
  if (!started.ok()) return started.status();
  return std::unique_ptr<Process>(*std::move(started));
}

std::unique_ptr<Process> ShimProcessLauncher::Adopt(pid_t pid, uint64_t start_ticks,
                                                    const std::string& exit_path) {
  return WorkerProcess::Adopt(pid, start_ticks, exit_path);
}

}  // namespace det::agent
