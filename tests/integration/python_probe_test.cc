// The agent's SubprocessTorchProbe against real processes: it runs the interpreter named
// (without a shell), reads torch's version from its stdout, turns a failed import into the
// interpreter's own last error line, a missing file into NotFound and a hung interpreter
// into DeadlineExceeded. (agent/python's unit tests use a fake probe and start nothing.)
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/python/python_finder.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

// An executable shell script `body` at `root`/`path`; its path.
std::string Script(const std::filesystem::path& root, const std::string& path,
                   const std::string& body) {
  std::filesystem::path p = root / path;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  chmod(p.c_str(), 0755);
  return p.string();
}

TEST(PythonProbe, TheProbeRunsTheInterpreterWithoutAShell) {
  const std::filesystem::path root =
      std::filesystem::path(::testing::TempDir()) / "python_probe";
  std::filesystem::remove_all(root);
  TorchProbe probe = SubprocessTorchProbe(absl::Seconds(20));
  std::string good = Script(root, "good/python3",
                            "[ \"$1\" = -c ] || exit 9\n"
                            "echo 'UserWarning: something chatty' >&2\necho 2.11.0+cu130");
  std::string bad = Script(root, "bad/python3",
                           "echo 'Traceback (most recent call last):' >&2\n"
                           "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1");
  absl::StatusOr<std::string> v = probe(good);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "2.11.0+cu130");
  absl::StatusOr<std::string> no = probe(bad);
  EXPECT_EQ(no.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(no.status().message(), "ModuleNotFoundError: No module named 'torch'");
  EXPECT_EQ(probe((root / "missing/python3").string()).status().code(),
            absl::StatusCode::kNotFound);

  std::string slow = Script(root, "slow/python3", "exec sleep 60");
  absl::StatusOr<std::string> hung = SubprocessTorchProbe(absl::Milliseconds(300))(slow);
  EXPECT_EQ(hung.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace det::agent
