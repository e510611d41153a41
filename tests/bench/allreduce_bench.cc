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
#include <gloo/allreduce.h>
#include <gloo/math.h>
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
#include "common/collective/file_rendezvous.h"
#include "common/collective/gloo_collective.h"
#include "tests/bench/allreduce_table.h"

namespace det::bench {
namespace {

using Clock = std::chrono::steady_clock;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// One rank: prints "size det_seconds raw_seconds" lines (rank 0 only).
int Worker(const WorkerArgs& args) {
  const int rank = args.rank, size = args.size, max_mib = args.max_mib;
  const std::string& dir = args.dir;
  collective::FileRendezvous rendezvous(dir, rank, size);
  auto c = collective::GlooCollective::Create(rank, size, rendezvous, "bench");
  if (!c.ok()) {
    std::cerr << "rank " << rank << ": " << c.status() << std::endl;
    return 1;
  }
  collective::GlooCollective& det = **c;
  const auto& context = det.gloo_context();
  uint32_t raw_tag = 1u << 30;  // Apart from the tags det's collective uses.
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{max_mib} << 20); bytes *= 4) {
    std::vector<float> buf(bytes / sizeof(float), 0.0f);
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{512} << 20) / bytes, 10, 200));
    std::vector<double> det_s, raw_s;
    for (int it = -2; it < iters; ++it) {  // Two warm-up rounds.
      if (!det.Barrier().ok()) return 1;
      auto t0 = Clock::now();
      if (absl::Status st = det.AllReduceSum(absl::MakeSpan(buf)); !st.ok()) {
        std::cerr << st << std::endl;
        return 1;
      }
      auto t1 = Clock::now();
      if (!det.Barrier().ok()) return 1;
      auto t2 = Clock::now();
      {
        gloo::AllreduceOptions opts(context);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
        opts.setTag(raw_tag++);
        gloo::allreduce(opts);
      }
      auto t3 = Clock::now();
      if (it < 0) continue;
      det_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      raw_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
    if (rank == 0) PrintWorkerLine(bytes, Median(det_s), Median(raw_s));
  }
  std::fflush(stdout);
  return 0;
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
