#include "common/worker/cpp/collective/testing/process_group.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace det::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::Start(
    int n, const std::function<std::vector<std::string>(int rank)>& argv, const std::string& dir,
    const std::function<EnvironmentVariables(int rank)>& env) {
  std::vector<std::unique_ptr<Subprocess>> procs;
  for (int r = 0; r < n; ++r) {
    SpawnOptions opts;
    opts.argv = argv(r);
    opts.env = CurrentEnvironment();
    if (env) opts.env = MergeEnvironment(opts.env, env(r));
    opts.stdout_mode = opts.stderr_mode = SpawnOptions::Output::kFile;
    opts.stdout_path = absl::StrCat(dir, "/rank-", r, ".out");
    opts.stderr_path = absl::StrCat(dir, "/rank-", r, ".err");
    auto p = Subprocess::Spawn(opts);
    if (!p.ok()) return p.status();
    procs.push_back(std::move(*p));
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(dir, std::move(procs)));
}

std::vector<RankResult> ProcessGroup::Wait(absl::Duration timeout, const std::vector<int>& only) {
  std::vector<RankResult> results(procs_.size());
  absl::Time deadline = absl::Now() + timeout;
  std::vector<int> awaited = only;
  if (awaited.empty()) {
    for (size_t r = 0; r < procs_.size(); ++r) awaited.push_back(static_cast<int>(r));
  }
  while (true) {
    for (size_t r = 0; r < procs_.size(); ++r) {
      if (results[r].exited) continue;
      if (auto st = procs_[r]->TryWait(); st.has_value()) {
        results[r].exited = true;
        results[r].status = *st;
        results[r].exit_time = absl::Now();
      }
    }
    bool all = true;
    for (int r : awaited) all = all && results[r].exited;
    if (all || absl::Now() > deadline) break;
    usleep(5000);  // Poll the children; no signal-based wait is available here.
  }
  for (size_t r = 0; r < procs_.size(); ++r) {
    if (!results[r].exited) {
      procs_[r]->SignalGroup(SIGCONT).IgnoreError();
      auto st = procs_[r]->Terminate(absl::ZeroDuration());
      if (st.ok()) results[r].status = *st;
    }
    results[r].out = Slurp(absl::StrCat(dir_, "/rank-", r, ".out"));
    results[r].err = Slurp(absl::StrCat(dir_, "/rank-", r, ".err"));
  }
  return results;
}

std::string RunfilePath(const std::string& path) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", workspace ? workspace : "det", "/", path);
}

std::string NewTempDir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(tmp ? tmp : "/tmp", "/", name, "-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

}  // namespace det::testing
