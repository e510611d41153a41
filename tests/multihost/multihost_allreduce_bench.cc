// All-reduce bandwidth between two hosts: det's collective layer (GlooCollective) next to
// raw Gloo calls on the same connections, rank 0 and rank 1 in two network namespaces
// joined by veth pairs and a bridge (tests/multihost/virtual_network.h), each listening on
// its host's address; the same two ranks on one host's loopback; then, when it is built,
// tests/bench/allreduce_bench's own loopback table. The definitions of allreduce_bench:
// time = median over iterations of one all-reduce on rank 0 (ranks start each iteration
// together after a barrier), algbw = bytes / time, busbw = algbw x 2(n-1)/n; det and raw
// calls alternate every iteration.
//
//   bazel run //tests/multihost:multihost_allreduce_bench -- [--max-mib 64]
//   (or tests/bench/multihost_allreduce.sh)
// Needs root and iproute2; says why and exits 0 otherwise. Each rank is this binary with
// --worker RANK HOST_ADDRESS DIR MAX_MIB, started with `ip netns exec` in its host.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process/subprocess.h"
#include "common/worker/cpp/collective/gloo_collective.h"
#include "tests/bench/gloo_allreduce_worker.h"
#include "tests/integration/test_cluster.h"
#include "tests/multihost/virtual_network.h"

namespace det::bench {
namespace {

constexpr int kRanks = 2;

// One rank of two, listening on `host` (prints allreduce_bench's worker lines on rank 0).
int Worker(int rank, const std::string& host, const std::string& dir, int max_mib) {
  collective::GlooOptions options;
  options.hostname = host;
  return GlooAllReduceWorker(rank, kRanks, dir, max_mib, options);
}

std::string Self() {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return len > 0 ? std::string(self, len) : "";
}

// Runs rank r in host hosts[r] and prints one table row per size; the lowest det/raw busbw
// ratio at >= 1 MiB.
absl::StatusOr<double> RunTable(testing::VirtualNetwork& net, const std::string& setup,
                                const std::vector<std::string>& hosts, bool loopback,
                                int max_mib) {
  const std::string dir = absl::StrCat("/tmp/mh-bench-",
                                       net.tag(), "-", setup);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < kRanks; ++r) {
    SpawnOptions opts;
    opts.argv = net.InHost(hosts[r], {Self(), "--worker", absl::StrCat(r),
                                      loopback ? "127.0.0.1" : net.Address(hosts[r]), dir,
                                      absl::StrCat(max_mib)});
    opts.env = CurrentEnvironment();
    opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
    opts.stdout_path = absl::StrCat(dir, "/rank-", r, ".out");
    opts.stderr_path = absl::StrCat(dir, "/rank-", r, ".err");
    auto p = Subprocess::Spawn(opts);
    if (!p.ok()) return p.status();
    procs.push_back(std::move(*p));
  }
  for (int r = 0; r < kRanks; ++r) {
    auto st = procs[r]->WaitFor(absl::Minutes(10));
    if (!st.ok() || !st->ok()) {
      return absl::InternalError(absl::StrCat(setup, ": rank ", r, " failed: ",
                                              testing::Slurp(absl::StrCat(dir, "/rank-", r, ".err"))));
    }
  }
  double worst = 2.0;
  const double factor = 2.0 * (kRanks - 1) / kRanks;
  std::string out = testing::Slurp(dir + "/rank-0.out");
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    int64_t bytes;
    double det_t, raw_t;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &bytes) || !absl::SimpleAtod(f[1], &det_t) ||
        !absl::SimpleAtod(f[2], &raw_t)) {
      continue;
    }
    const double det_bus = bytes / det_t / 1e9 * factor, raw_bus = bytes / raw_t / 1e9 * factor;
    if (bytes >= (1 << 20)) worst = std::min(worst, det_bus / raw_bus);
    std::printf("| %s | %s | %.1f | %.3f | %.1f | %.3f | %.1f%% |\n", setup.c_str(),
                bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB").c_str()
                                   : absl::StrCat(bytes >> 10, " KiB").c_str(),
                det_t * 1e6, det_bus, raw_t * 1e6, raw_bus, det_bus / raw_bus * 100);
  }
  std::filesystem::remove_all(dir, ec);
  std::fflush(stdout);
  return worst;
}

int Main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--worker") {
    int rank, max_mib;
    if (!absl::SimpleAtoi(argv[2], &rank) || !absl::SimpleAtoi(argv[5], &max_mib)) return 2;
    return Worker(rank, argv[3], argv[4], max_mib);
  }
  int max_mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--max-mib" && !absl::SimpleAtoi(argv[i + 1], &max_mib)) return 2;
  }
  if (absl::Status st = testing::VirtualNetwork::Available(); !st.ok()) {
    std::printf("skipped: %s\n", std::string(st.message()).c_str());
    return 0;
  }
  auto net = testing::VirtualNetwork::Create();
  if (!net.ok()) {
    std::cerr << net.status() << std::endl;
    return 1;
  }
  for (const char* label : {"a", "b"}) {
    if (auto st = (*net)->AddHost(label); !st.ok()) {
      std::cerr << st.status() << std::endl;
      return 1;
    }
  }
  std::printf("2 ranks; two hosts = network namespaces %s (%s) and %s (%s), veth pairs to a "
              "bridge\n\n| setup | size | det time (us) | det busbw (GB/s) | raw Gloo time (us) | "
              "raw Gloo busbw (GB/s) | det / raw busbw |\n| --- | --- | --- | --- | --- | --- | "
              "--- |\n",
              (*net)->Namespace("a").c_str(), (*net)->Address("a").c_str(),
              (*net)->Namespace("b").c_str(), (*net)->Address("b").c_str());
  std::fflush(stdout);
  absl::StatusOr<double> veth = RunTable(**net, "2 hosts (veth)", {"a", "b"}, false, max_mib);
  absl::StatusOr<double> lo = RunTable(**net, "1 host (loopback)", {"a", "a"}, true, max_mib);
  for (const auto* r : {&veth, &lo}) {
    if (!r->ok()) {
      std::cerr << r->status() << std::endl;
      return 1;
    }
  }
  std::printf("\nlowest det/raw busbw at >= 1 MiB: %.1f%% between hosts, %.1f%% on loopback\n",
              *veth * 100, *lo * 100);

  // allreduce_bench itself (its 2-rank loopback table), when built, run in host a.
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  std::string bench = absl::StrCat(ws ? ws : ".", "/bazel-bin/tests/bench/allreduce_bench");
  if (access(bench.c_str(), X_OK) != 0) {
    std::printf("\n(%s not built: no allreduce_bench reference table)\n", bench.c_str());
    return 0;
  }
  std::printf("\nallreduce_bench --ranks 2 in host a (loopback):\n\n");
  std::fflush(stdout);
  testing::CommandResult ref = testing::RunCommand(
      (*net)->InHost("a", {bench, "--ranks", "2", "--max-mib", absl::StrCat(max_mib)}),
      absl::Minutes(20));
  std::fputs(ref.out.c_str(), stdout);
  if (!ref.exit.ok()) {
    std::cerr << "allreduce_bench: " << ref.exit.ToString() << ": " << ref.err << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace det::bench

int main(int argc, char** argv) { return det::bench::Main(argc, argv); }
