#include "agent/python/python_finder.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PythonFinderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  // Writes an executable shell script at root_/path (or the absolute `path` when
  // `in_root` is false).
  std::string Script(const std::string& path, const std::string& body, bool in_root = true) {
    std::filesystem::path p = in_root ? root_ / path.substr(1) : std::filesystem::path(path);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    chmod(p.c_str(), 0755);
    return p.string();
  }
  std::filesystem::path root_;
};

std::vector<std::string> Paths(const std::vector<PythonCandidate>& c) {
  std::vector<std::string> out;
  for (const auto& x : c) out.push_back(x.path + " <" + x.where + ">");
  return out;
}

TEST_F(PythonFinderTest, CandidatesComeInOrderOnceEachAndOnlyWhenExecutable) {
  Script("/pyenv/shims/python3", "");
  Script("/usr/bin/python3", "");
  Script("/opt/torch/.venv/bin/python3", "");
  Script("/opt/zeta/venv/bin/python3", "");
  Script("/opt/conda/bin/python3", "");
  Script("/home/u/miniconda3/bin/python3", "");
  Script("/home/u/.venv/bin/python3", "");
  // Not executable: skipped.
  std::filesystem::create_directories(root_ / "opt/plain/.venv/bin");
  std::ofstream(root_ / "opt/plain/.venv/bin/python3") << "";

  auto got = PythonCandidates("/pyenv/shims:/nowhere:/usr/bin/", "/home/u", root_.string());
  EXPECT_THAT(Paths(got), ElementsAre("/pyenv/shims/python3 <PATH>", "/usr/bin/python3 <PATH>",
                                      "/opt/torch/.venv/bin/python3 <a venv under /opt>",
                                      "/opt/zeta/venv/bin/python3 <a venv under /opt>",
                                      "/opt/conda/bin/python3 <conda>",
                                      "/home/u/.venv/bin/python3 <a venv in the agent user's home>",
                                      "/home/u/miniconda3/bin/python3 <conda>"));
}

TEST_F(PythonFinderTest, TheFirstInterpreterWithTorchIsChosenAndTheOthersAreNamed) {
  std::vector<PythonCandidate> candidates = {
      {"/pyenv/python3", "PATH"}, {"/gone/python3", "PATH"}, {"/opt/t/.venv/bin/python3", "a venv under /opt"},
      {"/usr/bin/python3", "the system"}};
  std::map<std::string, absl::StatusOr<std::string>> answers = {
      {"/pyenv/python3", absl::FailedPreconditionError("ModuleNotFoundError: No module named 'torch'")},
      {"/gone/python3", absl::NotFoundError("no such file")},
      {"/opt/t/.venv/bin/python3", std::string("2.11.0+cu130")},
      {"/usr/bin/python3", std::string("1.13.0")}};
  std::vector<std::string> probed;
  TorchProbe probe = [&](const std::string& p) {
    probed.push_back(p);
    return answers.at(p);
  };
  PythonChoice c = ChooseWorkerPython("", candidates, probe);
  EXPECT_EQ(c.path, "/opt/t/.venv/bin/python3");
  EXPECT_EQ(c.torch_version, "2.11.0+cu130");
  EXPECT_EQ(c.reason, "found in a venv under /opt");
  EXPECT_THAT(probed, ElementsAre("/pyenv/python3", "/gone/python3", "/opt/t/.venv/bin/python3"));
  ASSERT_EQ(c.rejected.size(), 2u);
  EXPECT_THAT(c.rejected[0], HasSubstr("No module named 'torch'"));
  EXPECT_THAT(c.Describe(), HasSubstr("/opt/t/.venv/bin/python3 (found in a venv under /opt, torch 2.11.0+cu130)"));
}

TEST_F(PythonFinderTest, WithoutTorchAnywhereTheFirstRunningInterpreterIsKeptAndSaysSo) {
  std::vector<PythonCandidate> candidates = {{"/gone/python3", "PATH"}, {"/a/python3", "PATH"},
                                             {"/b/python3", "the system"}};
  TorchProbe probe = [](const std::string& p) -> absl::StatusOr<std::string> {
    if (p == "/gone/python3") return absl::NotFoundError("no such file");
    return absl::FailedPreconditionError("No module named 'torch'");
  };
  PythonChoice c = ChooseWorkerPython("", candidates, probe);
  EXPECT_EQ(c.path, "/a/python3");
  EXPECT_FALSE(c.has_torch());
  EXPECT_EQ(c.rejected.size(), 3u);
  EXPECT_THAT(c.Describe(), HasSubstr("cannot import torch"));
  EXPECT_THAT(NoPythonMessage("agent-1", c, /*needs_torch=*/true),
              HasSubstr("agent agent-1: no Python interpreter that can import torch"));
  EXPECT_THAT(NoPythonMessage("agent-1", c, true), HasSubstr("environment.python"));

  PythonChoice none = ChooseWorkerPython("", {{"/gone/python3", "PATH"}}, probe);
  EXPECT_TRUE(none.path.empty());
  EXPECT_THAT(none.Describe(), HasSubstr("no Python interpreter found (tried: PATH /gone/python3"));
}

TEST_F(PythonFinderTest, TheConfiguredInterpreterWinsWhateverTheProbeSays) {
  int probes = 0;
  TorchProbe probe = [&](const std::string&) -> absl::StatusOr<std::string> {
    ++probes;
    return absl::FailedPreconditionError("No module named 'torch'");
  };
  PythonChoice c = ChooseWorkerPython("/srv/py/bin/python3", {{"/usr/bin/python3", "the system"}}, probe);
  EXPECT_EQ(c.path, "/srv/py/bin/python3");
  EXPECT_EQ(c.reason, "agent.yaml worker_python");
  EXPECT_FALSE(c.has_torch());
  EXPECT_EQ(probes, 1);
}

TEST(EntrypointTest, PythonAndTorchEntrypoints) {
  EXPECT_TRUE(IsPythonEntrypoint({"python3", "train.py"}));
  EXPECT_TRUE(IsPythonEntrypoint({"python", "train.py"}));
  EXPECT_FALSE(IsPythonEntrypoint({"/usr/bin/python3", "train.py"}));
  EXPECT_FALSE(IsPythonEntrypoint({}));
  EXPECT_TRUE(EntrypointNeedsTorch({"python3", "-m", "det.launch.torch_distributed", "python3", "t.py"}));
  EXPECT_TRUE(EntrypointNeedsTorch({"python3", "-m", "det.pytorch.run", "model_def:MNistTrial"}));
  EXPECT_FALSE(EntrypointNeedsTorch({"python3", "train.py"}));
  EXPECT_FALSE(EntrypointNeedsTorch({"python3", "-m", "det"}));
}

}  // namespace
}  // namespace det::agent
