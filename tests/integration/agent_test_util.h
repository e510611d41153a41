// Helpers of the agent's integration tests, shared by agent_test (real det-master and
// det-agent daemons) and agent_process_test (the Agent in-process with a fake master):
// their workers are shell scripts that write their pid to a file in the test's directory
// ($TEST_DIR), which the test reads to watch (or kill) the worker process itself.
#ifndef DET_TESTS_INTEGRATION_AGENT_TEST_UTIL_H_
#define DET_TESTS_INTEGRATION_AGENT_TEST_UTIL_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace det::testing {

// A line of shell that writes the script's pid to $TEST_DIR/<name> whole (to <name>.tmp,
// then renamed), so that a reader never sees it half written.
std::string WritePidLine(const std::string& name);

// The script of a 2-rank run whose rank 1 fails: each rank prints "rank R of W in <its
// working directory>"; rank 0 writes its pid (WritePidLine "rank0") and sleeps until it is
// stopped; rank 1 waits for that pid, prints "rank 1 fails" to stderr and exits with code 3.
std::string FailingRankScript();

// Whether process `pid` exists (never for pid <= 0).
bool ProcessAlive(pid_t pid);

// The worker processes a test watches. Those still alive when this goes are killed
// (SIGKILL), whatever happened to their agent: no worker outlives its test.
class WorkerPids {
 public:
  WorkerPids() = default;
  ~WorkerPids();
  WorkerPids(const WorkerPids&) = delete;
  WorkerPids& operator=(const WorkerPids&) = delete;

  // The pid a worker wrote to `path` (WritePidLine), once it is there, watched from now on;
  // 0, and a test failure naming `path`, when none came within `timeout`.
  pid_t WaitForPidFile(const std::string& path, absl::Duration timeout);

 private:
  std::vector<pid_t> pids_;
};

}  // namespace det::testing

#endif  // DET_TESTS_INTEGRATION_AGENT_TEST_UTIL_H_
