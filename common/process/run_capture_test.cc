#include "common/process/run_capture.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;

TEST(RunCaptureTest, CapturesBothStreamsAndTheExit) {
  auto run = RunAndCapture({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                           CurrentEnvironment(), absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "out\n");
  EXPECT_EQ(run->err, "err\n");
  EXPECT_EQ(run->exit, (ExitStatus{3, 0}));
}

TEST(RunCaptureTest, LargeOutputOnBothStreamsDoesNotBlock) {
  auto run = RunAndCapture(
      {"/bin/sh", "-c", "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2"},
      CurrentEnvironment(), absl::Seconds(30));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out.size(), 300000u);
  EXPECT_EQ(run->err.size(), 300000u);
}

TEST(RunCaptureTest, TimeoutTerminatesAndNamesTheProgram) {
  auto run = RunAndCapture({"/bin/sleep", "30"}, CurrentEnvironment(), absl::Milliseconds(200));
  EXPECT_EQ(run.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(run.status().message(), HasSubstr("/bin/sleep did not finish within 200ms"));
}

TEST(RunCaptureTest, MissingProgramIsNotFound) {
  auto run = RunAndCapture({"/nonexistent/tool"}, CurrentEnvironment(), absl::Seconds(5));
  EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace det
