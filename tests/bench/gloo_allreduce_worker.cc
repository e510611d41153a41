#include "tests/bench/gloo_allreduce_worker.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "common/worker/cpp/collective/file_rendezvous.h"
#include "tests/bench/allreduce_table.h"

namespace det::bench {

using Clock = std::chrono::steady_clock;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

int GlooAllReduceWorker(int rank, int size, const std::string& dir, int max_mib,
                        const collective::GlooOptions& options) {
  collective::FileRendezvous rendezvous(dir, rank, size);
  auto c = collective::GlooCollective::Create(rank, size, rendezvous, "bench", options);
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

}  // namespace det::bench
