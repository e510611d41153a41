#include "tests/bench/allreduce_table.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/worker/cpp/collective/testing/process_group.h"

namespace det::bench {
namespace {

std::string Size(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB") : absl::StrCat(bytes >> 10, " KiB");
}

}  // namespace

bool ParseWorkerArgs(int argc, char** argv, WorkerArgs* out) {
  if (argc < 2 || std::string(argv[1]) != "--worker") return false;
  if (argc != 6 || !absl::SimpleAtoi(argv[2], &out->rank) || !absl::SimpleAtoi(argv[3], &out->size) ||
      !absl::SimpleAtoi(argv[5], &out->max_mib)) {
    std::fprintf(stderr, "usage: %s --worker RANK SIZE DIR MAX_MIB\n", argv[0]);
    std::exit(2);
  }
  out->dir = argv[4];
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void PrintWorkerLine(int64_t bytes, double det_seconds, double raw_seconds) {
  std::printf("%ld %.9f %.9f\n", static_cast<long>(bytes), det_seconds, raw_seconds);
}

absl::StatusOr<double> RunAndPrintTable(const std::string& raw, const std::vector<int>& world_sizes,
                                        int max_mib,
                                        const std::function<EnvironmentVariables(int rank)>& env) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return absl::InternalError("cannot read /proc/self/exe");
  self[len] = '\0';
  std::printf("| ranks | size | det time (us) | det algbw (GB/s) | det busbw (GB/s) | raw %s time (us) | "
              "raw %s busbw (GB/s) | det / raw busbw |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
              raw.c_str(), raw.c_str());
  double worst = 2.0;
  for (int n : world_sizes) {
    std::string dir = testing::NewTempDir("allreduce-bench");
    auto group = testing::ProcessGroup::Start(
        n,
        [&](int rank) {
          return std::vector<std::string>{self, "--worker", absl::StrCat(rank), absl::StrCat(n), dir,
                                          absl::StrCat(max_mib)};
        },
        dir, env);
    if (!group.ok()) return group.status();
    auto results = (*group)->Wait(absl::Minutes(10));
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    for (int r = 0; r < n; ++r) {
      if (!results[r].status.ok()) {
        return absl::InternalError(absl::StrCat(n, " ranks: rank ", r, " failed: ", results[r].err));
      }
    }
    const double factor = 2.0 * (n - 1) / n;
    for (absl::string_view line : absl::StrSplit(results[0].out, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      int64_t bytes;
      double det_t, raw_t;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &bytes) || !absl::SimpleAtod(f[1], &det_t) ||
          !absl::SimpleAtod(f[2], &raw_t)) {
        continue;
      }
      const double det_alg = static_cast<double>(bytes) / det_t / 1e9;
      const double raw_alg = static_cast<double>(bytes) / raw_t / 1e9;
      const double ratio = det_alg / raw_alg;
      if (bytes >= (1 << 20)) worst = std::min(worst, ratio);
      std::printf("| %d | %s | %.1f | %.3f | %.3f | %.1f | %.3f | %.1f%% |\n", n, Size(bytes).c_str(), det_t * 1e6,
                  det_alg, det_alg * factor, raw_t * 1e6, raw_alg * factor, ratio * 100);
    }
  }
  std::fflush(stdout);
  return worst;
}

}  // namespace det::bench
