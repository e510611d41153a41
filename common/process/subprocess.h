// Launching and supervising OS processes (POSIX/Linux only). The one place det calls
// fork/exec: the agent runs workers with it, `det deploy local cluster-up` starts daemons,
// integration tests start real master and agent binaries.
#ifndef DET_COMMON_PROCESS_SUBPROCESS_H_
#define DET_COMMON_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace det {

// How a process ended: exactly one of `exit_code` (normal exit) or `signal` (killed) is
// meaningful; `signal` is 0 for a normal exit.
struct ExitStatus {
  int exit_code = 0;
  int signal = 0;

  // True for a normal exit with code 0.
  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit code 3" or "killed by signal 9 (SIGKILL)".
  std::string ToString() const;

  friend bool operator==(const ExitStatus& a, const ExitStatus& b) {
    return a.exit_code == b.exit_code && a.signal == b.signal;
  }
  friend bool operator!=(const ExitStatus& a, const ExitStatus& b) { return !(a == b); }
};

using EnvironmentVariables = std::vector<std::pair<std::string, std::string>>;

// An OS identity a child process runs as. Switching to it needs root (CAP_SETUID and
// CAP_SETGID): in the child, before exec, its only group becomes `gid` (setgroups), then
// setgid(gid), then setuid(uid), so that it keeps none of the caller's privileges.
struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;

  friend bool operator==(const RunAs& a, const RunAs& b) {
    return a.uid == b.uid && a.gid == b.gid;
  }
};

// Switches the calling process to `user` as RunAs describes. Async-signal-safe (for a
// forked child of a multithreaded process). Returns 0, or the errno of the call that failed.
int SwitchToUser(const RunAs& user);

struct SpawnOptions {
  // Program and arguments, exec'd directly (no shell). REQUIRES: non-empty.
  // argv[0] without '/' is searched in PATH taken from `env` (default "/bin:/usr/bin" when
  // `env` has no PATH); argv[0] with '/' is used as is, a relative one against `cwd`.
  std::vector<std::string> argv;
  // The child's complete environment (nothing is inherited implicitly; start from
  // CurrentEnvironment() to inherit). REQUIRES: names non-empty, without '=', unique.
  EnvironmentVariables env;
  // Working directory of the child. Default: empty = the caller's.
  std::string cwd;

  enum class Output {
    kPipe,     // a pipe whose read end the caller gets from stdout_fd()/stderr_fd()
    kFile,     // appended to stdout_path/stderr_path (created with mode 0644)
    kInherit,  // the caller's own stdout/stderr
    kNull,     // /dev/null
  };
  Output stdout_mode = Output::kPipe;
  Output stderr_mode = Output::kPipe;
  // For kFile; relative paths are resolved against the caller's working directory.
  // Both may name the same file.
  std::string stdout_path;
  std::string stderr_path;

  // setsid(): the child leads a new session without a controlling terminal (daemons).
  // Either way the child leads its own process group (pgid == pid).
  bool new_session = false;

  // When set, the child runs as this user (see RunAs). The output files and `cwd` are
  // opened and entered before the switch, with the caller's rights.
  std::optional<RunAs> run_as;
};

// One spawned child process and its process group. Stdin of the child is /dev/null; all
// the caller's other descriptors except 0, 1, 2 are closed in the child, and signal
// dispositions and the signal mask are reset to the defaults.
//
// Only this object waits for the pid. The exited child stays a zombie, so its pid and
// pgid cannot be reused, until Terminate() or the destructor reaps it; until then
// SignalGroup() always reaches the right group.
//
// Destruction (unless Detach()ed) SIGKILLs whatever is left of the group and reaps the
// child. Thread-safe: e.g. one thread may block in Wait() while another calls Terminate().
// Processes that leave the group themselves (setsid, setpgid) are not tracked.
class Subprocess {
 public:
  // Forks and execs `options.argv`. Returns once the exec succeeded; a failure of exec,
  // chdir or of the output files comes back as an error naming the program or path with
  // strerror (NotFound for a missing binary or directory, PermissionDenied for one that is
  // not executable, InvalidArgument for bad options), and then no child is left behind.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(const SpawnOptions& options);

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Read ends of the child's stdout/stderr pipes (blocking, close-on-exec), or -1 unless
  // the mode was kPipe. Owned by this object: the caller may read (or set O_NONBLOCK)
  // but not close them; they stay valid until destruction.
  int stdout_fd() const { return stdout_fd_; }
  int stderr_fd() const { return stderr_fd_; }

  // kill(-pgid, sig); if the group is gone (the child moved itself out), signals the
  // child alone. FailedPrecondition once the child has been reaped.
  absl::Status SignalGroup(int sig);

  // The exit status if the child has exited, without blocking; nullopt while it runs.
  std::optional<ExitStatus> TryWait();
  // Blocks until the child exits.
  absl::StatusOr<ExitStatus> Wait();
  // As Wait(), but DeadlineExceeded if the child still runs after `timeout`.
  absl::StatusOr<ExitStatus> WaitFor(absl::Duration timeout);

  // SIGTERM to the whole group; waits up to `grace` for the child to exit; then SIGKILL to
  // the group (sweeping any member still alive, grandchildren included, even when the
  // child itself exited in time) and reaps the child. Returns the child's exit status.
  // Idempotent: later calls return the same status.
  absl::StatusOr<ExitStatus> Terminate(absl::Duration grace);

  // Gives up ownership of the process: the destructor will neither kill nor reap it (for
  // daemons that must outlive the caller). Other methods keep working.
  void Detach();

 private:
  Subprocess(pid_t pid, int pidfd, int stdout_fd, int stderr_fd);

  // Blocks until the child is waitable (without reaping) or `deadline` (monotonic
  // nanoseconds; negative = none) passes.
  absl::StatusOr<std::optional<ExitStatus>> AwaitExit(int64_t deadline_ns);
  // Reaps the child if not yet reaped (it must have exited or been SIGKILLed).
  absl::StatusOr<ExitStatus> Reap();

  const pid_t pid_;
  const int pidfd_;  // pidfd_open() of the child, or -1 where unsupported
  const int stdout_fd_;
  const int stderr_fd_;

  absl::Mutex mu_;
  std::optional<ExitStatus> exit_status_ ABSL_GUARDED_BY(mu_);
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;
  bool detached_ ABSL_GUARDED_BY(mu_) = false;
};

// This process's environment, in `environ` order.
EnvironmentVariables CurrentEnvironment();

// `base` with each of `overrides` applied: an existing name keeps its position and takes
// the new value, a new name is appended.
EnvironmentVariables MergeEnvironment(EnvironmentVariables base,
                                      const EnvironmentVariables& overrides);

}  // namespace det

#endif  // DET_COMMON_PROCESS_SUBPROCESS_H_
