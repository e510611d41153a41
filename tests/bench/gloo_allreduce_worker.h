// One rank of the Gloo all-reduce benchmarks (allreduce_bench, the multihost one): times
// det's GlooCollective::AllReduceSum next to a raw gloo::allreduce on the same context,
// 4 KiB to max_mib MiB in steps of x4, and on rank 0 prints one PrintWorkerLine per size
// (medians over the iterations; two warm-up rounds). Returns the process exit code.
#ifndef DET_TESTS_BENCH_GLOO_ALLREDUCE_WORKER_H_
#define DET_TESTS_BENCH_GLOO_ALLREDUCE_WORKER_H_

#include <string>

#include "common/worker/cpp/collective/gloo_collective.h"

namespace det::bench {

// REQUIRES: 0 <= rank < size; `dir` is the FileRendezvous directory all ranks share.
int GlooAllReduceWorker(int rank, int size, const std::string& dir, int max_mib,
                        const collective::GlooOptions& options = {});

}  // namespace det::bench

#endif  // DET_TESTS_BENCH_GLOO_ALLREDUCE_WORKER_H_
