// For tests and benchmarks: N processes, one per rank, started together, their output
// in files, waited for with a deadline and the time each one exited.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_TESTING_PROCESS_GROUP_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_TESTING_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace det::testing {

struct RankResult {
  bool exited = false;  // false: still ran at the deadline (then killed)
  ExitStatus status;
  absl::Time exit_time;
  std::string out;  // stdout
  std::string err;  // stderr
};

class ProcessGroup {
 public:
  // Starts `n` processes; rank r runs argv(r) with this process's environment plus
  // env(r). Their stdout/stderr go to <dir>/rank-<r>.{out,err}.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Start(
      int n, const std::function<std::vector<std::string>(int rank)>& argv, const std::string& dir,
      const std::function<EnvironmentVariables(int rank)>& env = nullptr);

  Subprocess& process(int rank) { return *procs_[rank]; }

  // Waits until every process exited (or, when `only` is not empty, those ranks) or
  // `timeout` passed; then SIGKILLs the ones still running. Results indexed by rank.
  std::vector<RankResult> Wait(absl::Duration timeout, const std::vector<int>& only = {});

 private:
  ProcessGroup(std::string dir, std::vector<std::unique_ptr<Subprocess>> procs)
      : dir_(std::move(dir)), procs_(std::move(procs)) {}

  std::string dir_;
  std::vector<std::unique_ptr<Subprocess>> procs_;
};

// $TEST_SRCDIR/$TEST_WORKSPACE/<path> (a data dependency of the running test).
std::string RunfilePath(const std::string& path);

// A new empty directory under $TEST_TMPDIR (or /tmp).
std::string NewTempDir(const std::string& name);

}  // namespace det::testing

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_TESTING_PROCESS_GROUP_H_
