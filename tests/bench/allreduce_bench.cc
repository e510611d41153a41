// All-reduce bandwidth of det's collective layer (collective::GlooCollective) next to raw
// Gloo calls (gloo::allreduce on the same connected context) in the same run, for 2 and
// 4 ranks on loopback, 4 KiB..64 MiB of floats.
//
// Definitions as in nccl-tests: time = median over iterations of one all-reduce on rank
// 0 (ranks start each iteration together after a barrier); algbw = bytes / time;
// busbw = algbw x 2(n-1)/n, the traffic of a ring all-reduce per rank. det and raw
// calls alternate every iteration, so drift of the machine hits both alike.
//
//   allreduce_bench [--ranks 2,4] [--max-mib 64]
// (the same binary runs each rank: allreduce_bench --worker RANK SIZE DIR MAX_MIB)
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/bench/allreduce_table.h"
#include "tests/bench/gloo_allreduce_worker.h"

namespace det::bench {
namespace {


// One rank: prints "size det_seconds raw_seconds" lines (rank 0 only).
int Worker(const WorkerArgs& args) {
  return GlooAllReduceWorker(args.rank, args.size, args.dir, args.max_mib);
}

int Main(int argc, char** argv) {
  WorkerArgs worker;
  if (ParseWorkerArgs(argc, argv, &worker)) return Worker(worker);
  std::vector<int> world_sizes = {2, 4};
  int max_mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--ranks") {
      world_sizes.clear();
      for (absl::string_view s : absl::StrSplit(argv[i + 1], ',')) {
        int n;
        if (!absl::SimpleAtoi(s, &n) || n < 2) return 2;
        world_sizes.push_back(n);
      }
    } else if (flag == "--max-mib") {
      if (!absl::SimpleAtoi(argv[i + 1], &max_mib)) return 2;
    }
  }
  absl::StatusOr<double> worst = RunAndPrintTable("Gloo", world_sizes, max_mib);
  if (!worst.ok()) {
    std::cerr << worst.status() << std::endl;
    return 1;
  }
  std::printf("\ndet busbw at >= 1 MiB is within 5%% of raw Gloo: %s (lowest det/raw: %.1f%%)\n",
              *worst >= 0.95 ? "yes" : "NO", *worst * 100);
  return 0;
}

}  // namespace
}  // namespace det::bench

int main(int argc, char** argv) { return det::bench::Main(argc, argv); }
