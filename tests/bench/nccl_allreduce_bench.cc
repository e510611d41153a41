// All-reduce bandwidth of det's NCCL collective (collective::NcclCollective) next to raw
// NCCL calls (ncclAllReduce on a second communicator of the same ranks) in the same run:
// one rank per GPU (CUDA_VISIBLE_DEVICES = its GPU), 1, 2, 4 and 8 ranks as far as the
// machine's GPUs go, 4 KiB..256 MiB of floats; the table as allreduce_bench's
// (allreduce_table.h). On a machine without a GPU it says so and exits 0.
//
//   nccl_allreduce_bench [--max-mib 256]
// (the same binary runs each rank: nccl_allreduce_bench --worker RANK SIZE DIR MAX_MIB)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/worker/cpp/collective/cuda_devices.h"
#include "common/worker/cpp/collective/file_rendezvous.h"
#include "common/worker/cpp/collective/nccl_collective.h"
#include "tests/bench/allreduce_table.h"

namespace det::bench {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(int rank, const std::string& what) {
  std::cerr << "rank " << rank << ": " << what << std::endl;
  return 1;
}

// One rank: prints "size det_seconds raw_seconds" lines (rank 0 only).
int Worker(const WorkerArgs& args) {
  const int rank = args.rank, size = args.size, max_mib = args.max_mib;
  const std::string& dir = args.dir;
  collective::FileRendezvous rendezvous(dir, rank, size);
  auto c = collective::NcclCollective::Create(rank, size, rendezvous, "det");
  if (!c.ok()) return Fail(rank, c.status().ToString());
  collective::NcclCollective& det = **c;
  // The raw side: its own communicator, bootstrapped through the same rendezvous.
  absl::StatusOr<std::string> id = collective::ExchangeNcclUniqueId(
      rank, rendezvous, "raw", absl::Minutes(2), absl::OkStatus(), []() -> absl::StatusOr<std::string> {
        ncclUniqueId u;
        if (ncclGetUniqueId(&u) != ncclSuccess) return absl::InternalError("ncclGetUniqueId failed");
        return std::string(reinterpret_cast<const char*>(&u), sizeof(u));
      });
  if (!id.ok()) return Fail(rank, id.status().ToString());
  ncclUniqueId unique;
  std::copy(id->begin(), id->end(), reinterpret_cast<char*>(&unique));
  ncclComm_t raw;
  if (ncclResult_t r = ncclCommInitRank(&raw, size, unique, rank); r != ncclSuccess) {
    return Fail(rank, absl::StrCat("ncclCommInitRank: ", ncclGetErrorString(r)));
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const int64_t max_bytes = int64_t{max_mib} << 20;
  float* buf = nullptr;
  if (cudaMalloc(&buf, max_bytes) != cudaSuccess) return Fail(rank, "cudaMalloc failed");
  cudaMemset(buf, 0, max_bytes);
  cudaDeviceSynchronize();
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{8} << 30) / bytes, 20, 500));
    std::vector<double> det_s, raw_s;
    for (int it = -5; it < iters; ++it) {  // Five warm-up rounds.
      if (!det.Barrier().ok()) return Fail(rank, "barrier failed");
      auto t0 = Clock::now();
      if (absl::Status st = det.AllReduceSum(absl::MakeSpan(buf, count)); !st.ok()) {
        return Fail(rank, st.ToString());
      }
      auto t1 = Clock::now();
      if (!det.Barrier().ok()) return Fail(rank, "barrier failed");
      auto t2 = Clock::now();
      if (ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, raw, stream) != ncclSuccess ||
          cudaStreamSynchronize(stream) != cudaSuccess) {
        return Fail(rank, "raw ncclAllReduce failed");
      }
      auto t3 = Clock::now();
      if (it < 0) continue;
      det_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      raw_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
    if (rank == 0) PrintWorkerLine(bytes, Median(det_s), Median(raw_s));
  }
  std::fflush(stdout);
  cudaFree(buf);
  ncclCommDestroy(raw);
  return 0;
}

int Main(int argc, char** argv) {
  WorkerArgs worker;
  if (ParseWorkerArgs(argc, argv, &worker)) return Worker(worker);
  int max_mib = 256;
  if (argc == 3 && std::string(argv[1]) == "--max-mib" && absl::SimpleAtoi(argv[2], &max_mib) && max_mib > 0) {
  } else if (argc != 1) {
    std::cerr << "usage: nccl_allreduce_bench [--max-mib N]" << std::endl;
    return 2;
  }
  collective::CudaDevices devices = collective::DiscoverCudaDevices();
  if (devices.count == 0) {
    std::printf("no CUDA device (%s): nothing to measure\n", devices.why_none.c_str());
    return 0;
  }
  std::vector<int> world_sizes;
  for (int n : {1, 2, 4, 8}) {
    if (n <= devices.count) world_sizes.push_back(n);
  }
  absl::StatusOr<double> worst = RunAndPrintTable("NCCL", world_sizes, max_mib, [](int rank) {
    return EnvironmentVariables{{"CUDA_VISIBLE_DEVICES", absl::StrCat(rank)}};
  });
  if (!worst.ok()) {
    std::cerr << worst.status() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace det::bench

int main(int argc, char** argv) { return det::bench::Main(argc, argv); }
