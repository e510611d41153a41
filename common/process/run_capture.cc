#include "common/process/run_capture.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace det {

absl::StatusOr<CapturedRun> RunAndCapture(const std::vector<std::string>& argv,
                                          const EnvironmentVariables& env,
                                          absl::Duration timeout) {
  SpawnOptions opts;
  opts.argv = argv;
  opts.env = env;
  absl::StatusOr<std::unique_ptr<Subprocess>> spawned = Subprocess::Spawn(opts);
  if (!spawned.ok()) return spawned.status();
  Subprocess& child = **spawned;
  CapturedRun run;
  struct Stream {
    int fd;
    std::string* sink;
  } streams[2] = {{child.stdout_fd(), &run.out}, {child.stderr_fd(), &run.err}};
  const absl::Time deadline = absl::Now() + timeout;
  char buf[16384];
  while (streams[0].fd >= 0 || streams[1].fd >= 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      (void)child.Terminate(absl::Seconds(1));
      return absl::DeadlineExceededError(
          absl::StrCat(argv[0], " did not finish within ", absl::FormatDuration(timeout)));
    }
    pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {streams[i].fd, POLLIN, 0};
    const int wait_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    if (::poll(fds, 2, wait_ms) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (streams[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(streams[i].fd, buf, sizeof(buf));
      if (n > 0) {
        streams[i].sink->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        streams[i].fd = -1;
      }
    }
  }
  absl::StatusOr<ExitStatus> exit =
      child.WaitFor(std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (!exit.ok()) return exit.status();
  run.exit = *exit;
  return run;
}

}  // namespace det
