// Training throughput of the example (det-fashion-mnist, MLP 784-128-10) on 1, 2 and 4 CPU
// ranks: a real master and one agent with 4 CPU slots on loopback, one experiment per
// rank count. Samples/s is the median over the chief's batch-group reports, the first
// (warm-up) group left out. Strong scaling keeps the global batch; weak scaling keeps
// the per-slot batch.
//
//   scaling_bench [--batches 200] [--ranks 1,2,4]
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/test_cluster.h"

namespace det::bench {
namespace {

std::string Config(int ranks, int global_batch, int batches) {
  return absl::StrCat(R"(name: scaling
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: )", global_batch, R"(
  learning_rate: 0.05
  hidden_size: 128
records_per_epoch: 60000
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: )", batches, R"(
scheduling_unit: 20
max_restarts: 0
resources:
  slots_per_trial: )", ranks, R"(
data:
  dir: /usr/share/datasets/fashion-mnist
)");
}

int Run(int batches, const std::vector<int>& ranks);

// Median samples/s of the chief's "batch N/T ... S samples/s)" lines after the first.
double SamplesPerSecond(const std::string& logs) {
  std::vector<double> rates;
  for (absl::string_view line : absl::StrSplit(logs, '\n')) {
    auto end = line.find(" samples/s)");
    if (end == absl::string_view::npos) continue;
    auto start = line.rfind(' ', end - 1);
    double v;
    if (absl::SimpleAtod(line.substr(start + 1, end - start - 1), &v)) rates.push_back(v);
  }
  if (rates.size() > 1) rates.erase(rates.begin());
  if (rates.empty()) return 0;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

int Main(int argc, char** argv) {
  int batches = 200;
  std::vector<int> ranks = {1, 2, 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--batches" && !absl::SimpleAtoi(argv[i + 1], &batches)) return 2;
    if (flag == "--ranks") {
      ranks.clear();
      for (absl::string_view s : absl::StrSplit(argv[i + 1], ',')) {
        int n;
        if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 4) return 2;
        ranks.push_back(n);
      }
    }
  }
  // Run outside `bazel test`: find the binaries in this program's runfiles.
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  if (!getenv("TEST_SRCDIR")) setenv("TEST_SRCDIR", absl::StrCat(self, ".runfiles").c_str(), 1);
  if (!getenv("TEST_WORKSPACE")) setenv("TEST_WORKSPACE", "det", 1);
  std::string tmp = "/tmp/det-scaling-bench-XXXXXX";
  bool own_tmp = !getenv("TEST_TMPDIR") && mkdtemp(tmp.data()) != nullptr;
  if (own_tmp) setenv("TEST_TMPDIR", tmp.c_str(), 1);
  int rc = Run(batches, ranks);
  std::error_code ignored;
  if (own_tmp) std::filesystem::remove_all(tmp, ignored);
  return rc;
}

int Run(int batches, const std::vector<int>& ranks) {

  testing::TestCluster cluster("scaling");
  if (auto st = cluster.StartMaster(); !st.ok()) {
    std::cerr << st << std::endl;
    return 1;
  }
  if (auto st = cluster.StartAgent("agent-0", 4); !st.ok()) {
    std::cerr << st << std::endl;
    return 1;
  }
  int experiment = 0;
  auto run = [&](int n, int global_batch) -> double {
    std::string config = cluster.WriteFile(absl::StrCat("exp-", ++experiment, ".yaml"), Config(n, global_batch, batches));
    auto r = cluster.Det({"experiment", "create", config, "-f"}, absl::Minutes(10));
    if (!r.exit.ok()) {
      std::cerr << "experiment with " << n << " ranks failed:\n" << r.out << r.err << std::endl;
      return 0;
    }
    return SamplesPerSecond(r.out);
  };
  std::printf("%d batches per run; machine: %ld cores\n\n", batches, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("| scaling | ranks | per-slot batch | global batch | samples/s | speed-up | efficiency |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const char* mode : {"strong", "weak"}) {
    double base = 0;
    for (int n : ranks) {
      int global = std::string(mode) == "strong" ? 256 : 64 * n;
      double rate = run(n, global);
      if (base == 0) base = rate / ranks.front();
      double speedup = base > 0 ? rate / base : 0;
      std::printf("| %s | %d | %d | %d | %.0f | %.2fx | %.0f%% |\n", mode, n, global / n, global, rate, speedup,
                  100.0 * speedup / n);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace det::bench

int main(int argc, char** argv) { return det::bench::Main(argc, argv); }
