#include "tests/integration/agent_test_util.h"

#include <signal.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/testing/wait_until.h"
#include "gtest/gtest.h"

namespace det::testing {

std::string WritePidLine(const std::string& name) {
  return absl::StrReplaceAll(
      R"(echo $$ > "$TEST_DIR/NAME.tmp" && mv "$TEST_DIR/NAME.tmp" "$TEST_DIR/NAME")",
      {{"NAME", name}});
}

std::string FailingRankScript() {
  return absl::StrCat(R"sh(echo "rank $RANK of $WORLD_SIZE in $(pwd)"
if [ "$RANK" = 1 ]; then
  while [ ! -s "$TEST_DIR/rank0" ]; do sleep 0.02; done
  echo "rank 1 fails" >&2
  exit 3
fi
)sh",
                      WritePidLine("rank0"), "\nexec sleep 1000\n");
}

bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

WorkerPids::~WorkerPids() {
  for (pid_t pid : pids_) {
    if (ProcessAlive(pid)) kill(pid, SIGKILL);
  }
}

pid_t WorkerPids::WaitForPidFile(const std::string& path, absl::Duration timeout) {
  pid_t pid = 0;
  // The file appears whole (renamed into place), so one read is the whole pid.
  EXPECT_TRUE(WaitUntil(
      absl::StrCat("a pid in ", path),
      [&] {
        std::ifstream in(path);
        long value = 0;
        if (!(in >> value) || value <= 0) return false;
        pid = static_cast<pid_t>(value);
        return true;
      },
      timeout));
  if (pid > 0) pids_.push_back(pid);
  return pid;
}

}  // namespace det::testing
