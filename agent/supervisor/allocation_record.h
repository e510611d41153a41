// What a restarted agent needs to find an allocation's workers again: the launch, and per
// rank the shim's pid and start time and how far its output has been shipped. The agent
// keeps one record per allocation in RUN_DIR/state.json (RUN_DIR = WORK_DIR/run/ALLOCATION)
// next to the ranks' output and exit files.
#ifndef DET_AGENT_SUPERVISOR_ALLOCATION_RECORD_H_
#define DET_AGENT_SUPERVISOR_ALLOCATION_RECORD_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace det::agent {

struct WorkerRecord {
  int rank = 0;
  // The shim; 0 when the rank never started.
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  // Bytes of stdout and stderr the master has accepted.
  int64_t shipped[2] = {0, 0};
  // The master has accepted the rank's exit report.
  bool exit_reported = false;
};

struct AllocationRecord {
  // Without the model context (it is on disk).
  v1::LaunchCommand launch;
  std::vector<WorkerRecord> workers;
  bool launched_reported = false;
  // Being stopped: SIGKILL after kill_deadline_ms (Unix milliseconds).
  bool killing = false;
  int64_t kill_deadline_ms = 0;
  bool agent_stopping = false;
};

// Files of rank `rank` in `run_dir`: "rank-R.stdout", "rank-R.stderr", "rank-R.exit".
std::string RankOutputPath(const std::string& run_dir, int rank, int stream);
std::string RankExitPath(const std::string& run_dir, int rank);
std::string RecordPath(const std::string& run_dir);

// Writes the record atomically (temporary file renamed over RecordPath(run_dir)).
absl::Status WriteAllocationRecord(const std::string& run_dir, const AllocationRecord& record);
// NotFound without a record; DataLoss, naming the file, when it cannot be parsed.
absl::StatusOr<AllocationRecord> ReadAllocationRecord(const std::string& run_dir);

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_ALLOCATION_RECORD_H_
