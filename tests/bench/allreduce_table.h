// The driver both all-reduce benchmarks share: starts one process per rank (this same
// binary with --worker), reads rank 0's "bytes det_seconds raw_seconds" lines and prints
// the nccl-tests table (algbw = bytes / time, busbw = algbw x 2(n-1)/n) with det next to
// the raw library.
#ifndef DET_TESTS_BENCH_ALLREDUCE_TABLE_H_
#define DET_TESTS_BENCH_ALLREDUCE_TABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"

namespace det::bench {

// What a worker is told: `<binary> --worker RANK SIZE DIR MAX_MIB`.
struct WorkerArgs {
  int rank = 0;
  int size = 0;
  std::string dir;  // the ranks' rendezvous directory
  int max_mib = 0;  // sizes run from 4 KiB to this, times 4
};
// True when argv is a worker's command line; fills `out`. Exits 2 on malformed arguments.
bool ParseWorkerArgs(int argc, char** argv, WorkerArgs* out);

// The median of a worker's per-iteration times.
double Median(std::vector<double> v);

// Rank 0's line for one size.
void PrintWorkerLine(int64_t bytes, double det_seconds, double raw_seconds);

// Runs each world size of `world_sizes` (rank r with `env(r)` added to its environment)
// and prints the table, `raw` naming the raw library ("Gloo", "NCCL"). Returns the lowest
// det/raw ratio at >= 1 MiB over all rows (2.0 when there is none), or the first failure.
absl::StatusOr<double> RunAndPrintTable(const std::string& raw, const std::vector<int>& world_sizes,
                                        int max_mib,
                                        const std::function<EnvironmentVariables(int rank)>& env = nullptr);

}  // namespace det::bench

#endif  // DET_TESTS_BENCH_ALLREDUCE_TABLE_H_
