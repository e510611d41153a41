// One rank of a multi-process collective test (gloo_collective_test,
// nccl_collective_gpu_test). Prints "rank R ok" and exits 0 when its scenario passed;
// prints the failure to stderr and exits 1 (scenario check failed) or 3 (a collective
// call failed).
//
//   collective_test_worker BACKEND RANK SIZE DIR KEY SCENARIO [VICTIM] [TIMEOUT_MS]
//
// BACKEND: gloo | nccl. SCENARIO:
//   ops          all-reduce (float, int64), broadcast, barrier; checks every result
//   generations  two collectives one after the other under different keys
//   die          repeated all-reduces; rank VICTIM SIGKILLs itself in the middle
//   hang         rank VICTIM SIGSTOPs itself; the others must time out (TIMEOUT_MS)
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/worker/cpp/collective/file_rendezvous.h"
#include "common/worker/cpp/collective/gloo_collective.h"
#include "common/worker/cpp/collective/nccl_collective.h"

namespace det::collective {
namespace {

struct Args {
  std::string backend;
  int rank = 0;
  int size = 1;
  std::string dir;
  std::string key;
  std::string scenario;
  int victim = 1;
  int timeout_ms = 60000;
};


#define CHECK_OR_FAIL(cond, msg)                                               \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::cerr << "rank " << args.rank << ": check failed: " << msg << "\n"; \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

void Ok(const absl::Status& st, int rank) {
  if (st.ok()) return;
  std::cerr << "rank " << rank << ": " << st << std::endl;
  std::exit(3);
}

// Buffers where the backend wants them: host vectors for Gloo, device copies for NCCL.
template <typename T>
class Buffer {
 public:
  Buffer(std::vector<T> host, bool device) : host_(std::move(host)), device_(device) {
    if (device_) {
      cudaMalloc(&dev_, host_.size() * sizeof(T));
      cudaMemcpy(dev_, host_.data(), host_.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  ~Buffer() {
    if (device_) cudaFree(dev_);
  }
  absl::Span<T> span() { return absl::MakeSpan(device_ ? dev_ : host_.data(), host_.size()); }
  const std::vector<T>& Read() {
    if (device_) cudaMemcpy(host_.data(), dev_, host_.size() * sizeof(T), cudaMemcpyDeviceToHost);
    return host_;
  }

 private:
  std::vector<T> host_;
  bool device_;
  T* dev_ = nullptr;
};

std::unique_ptr<Collective> Connect(const Args& args, const std::string& key) {
  FileRendezvous rendezvous(args.dir, args.rank, args.size);
  if (args.backend == "nccl") {
    NcclOptions options;
    options.device = 0;
    options.timeout = absl::Milliseconds(args.timeout_ms);
    auto c = NcclCollective::Create(args.rank, args.size, rendezvous, key, options);
    Ok(c.status(), args.rank);
    return std::move(*c);
  }
  GlooOptions options;
  options.timeout = absl::Milliseconds(args.timeout_ms);
  auto c = GlooCollective::Create(args.rank, args.size, rendezvous, key, options);
  Ok(c.status(), args.rank);
  return std::move(*c);
}

void Ops(const Args& args, Collective& c) {
  const bool dev = c.device() == Device::kCuda;
  const int n = 1000003;  // Not a multiple of anything Gloo chunks by.
  std::vector<float> f(n);
  for (int i = 0; i < n; ++i) f[i] = static_cast<float>((args.rank + 1) * (i % 7));
  Buffer<float> fb(f, dev);
  Ok(c.AllReduceSum(fb.span()), args.rank);
  const float ranks_sum = static_cast<float>(args.size * (args.size + 1) / 2);
  const auto& fr = fb.Read();
  for (int i = 0; i < n; ++i) CHECK_OR_FAIL(fr[i] == ranks_sum * (i % 7), "float sum at " << i << ": " << fr[i]);

  std::vector<int64_t> q(4097);
  for (size_t i = 0; i < q.size(); ++i) q[i] = int64_t{1000000000000} * args.rank + static_cast<int64_t>(i);
  Buffer<int64_t> qb(q, dev);
  Ok(c.AllReduceSum(qb.span()), args.rank);
  const int64_t rank_total = int64_t{1000000000000} * (args.size * (args.size - 1) / 2);
  const auto& qr = qb.Read();
  for (size_t i = 0; i < qr.size(); ++i) {
    CHECK_OR_FAIL(qr[i] == rank_total + static_cast<int64_t>(i) * args.size, "int64 sum at " << i);
  }

  // Inexact float sums still come out bit-identical on every rank: compare with the
  // root's copy.
  std::vector<float> g(65537);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(args.rank + 1) / static_cast<float>(i + 3);
  Buffer<float> gb(g, dev);
  Ok(c.AllReduceSum(gb.span()), args.rank);
  std::vector<float> mine = gb.Read();
  Buffer<float> root(mine, dev);
  Ok(c.Broadcast(root.span(), 0), args.rank);
  const auto& theirs = root.Read();
  for (size_t i = 0; i < mine.size(); ++i) CHECK_OR_FAIL(mine[i] == theirs[i], "rank 0 has other bits at " << i);

  const int from = args.size - 1;
  std::vector<uint8_t> bytes(100001, 0);
  if (args.rank == from) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  }
  Buffer<uint8_t> bb(bytes, dev);
  Ok(c.Broadcast(bb.span(), from), args.rank);
  const auto& br = bb.Read();
  for (size_t i = 0; i < br.size(); ++i) CHECK_OR_FAIL(br[i] == static_cast<uint8_t>(i * 31 + 7), "broadcast byte " << i);

  Ok(c.Barrier(), args.rank);
  CHECK_OR_FAIL(!c.Broadcast(bb.span(), args.size).ok(), "a root outside the world was accepted");
}

int Main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: collective_test_worker BACKEND RANK SIZE DIR KEY SCENARIO [VICTIM] [TIMEOUT_MS]\n";
    return 2;
  }
  Args args;
  args.backend = argv[1];
  if (!absl::SimpleAtoi(argv[2], &args.rank) || !absl::SimpleAtoi(argv[3], &args.size)) return 2;
  args.dir = argv[4];
  args.key = argv[5];
  args.scenario = argv[6];
  if (argc > 7 && !absl::SimpleAtoi(argv[7], &args.victim)) return 2;
  if (argc > 8 && !absl::SimpleAtoi(argv[8], &args.timeout_ms)) return 2;

  if (args.scenario == "ops") {
    auto c = Connect(args, args.key);
    Ops(args, *c);
  } else if (args.scenario == "generations") {
    for (int gen = 0; gen < 2; ++gen) {
      auto c = Connect(args, absl::StrCat(args.key, "/run-", gen));
      std::vector<int64_t> v = {args.rank + 1, gen};
      Ok(c->AllReduceSum(absl::MakeSpan(v)), args.rank);
      CHECK_OR_FAIL(v[0] == args.size * (args.size + 1) / 2 && v[1] == gen * args.size, "generation " << gen);
    }
  } else if (args.scenario == "die" || args.scenario == "hang") {
    auto c = Connect(args, args.key);
    std::vector<float> v(1 << 18, 1.0f);
    for (int i = 0; i < 1000000; ++i) {
      if (i == 5 && args.rank == args.victim) {
        std::cout << "rank " << args.rank << " stops at step " << i << std::endl;
        kill(getpid(), args.scenario == "die" ? SIGKILL : SIGSTOP);
      }
      Ok(c->AllReduceSum(absl::MakeSpan(v)), args.rank);
      std::fill(v.begin(), v.end(), 1.0f);
    }
    std::cerr << "rank " << args.rank << ": the victim's failure was never noticed\n";
    return 1;
  } else {
    std::cerr << "unknown scenario " << args.scenario << "\n";
    return 2;
  }
  std::cout << "rank " << args.rank << " ok" << std::endl;
  return 0;
}

}  // namespace
}  // namespace det::collective

int main(int argc, char** argv) { return det::collective::Main(argc, argv); }
