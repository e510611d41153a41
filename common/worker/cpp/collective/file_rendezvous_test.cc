#include "common/worker/cpp/collective/file_rendezvous.h"

#include <stdlib.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::collective {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir() {
  std::string t = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/rdv-XXXXXX";
  return mkdtemp(t.data());
}

TEST(FileRendezvous, EveryRankGetsEveryValueInRankOrder) {
  std::string dir = TempDir();
  std::vector<std::vector<std::string>> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      FileRendezvous rdv(dir, r, 3);
      std::string value = "v" + std::to_string(r);
      value.push_back('\0');  // Binary-safe.
      auto all = rdv.AllGather("run-1/gloo", value, absl::Seconds(30));
      ASSERT_TRUE(all.ok()) << all.status();
      got[r] = *all;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(got[r], ElementsAre(std::string("v0\0", 3), std::string("v1\0", 3), std::string("v2\0", 3)));
  }
}

TEST(FileRendezvous, MissingRanksAreNamedAtTheDeadline) {
  FileRendezvous rdv(TempDir(), 1, 4);
  auto all = rdv.AllGather("k", "x", absl::Milliseconds(50));
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(all.status().message(), HasSubstr("rank(s) 0, 2, 3 did not arrive"));
}

TEST(FileRendezvous, KeysThatEscapeTheDirectoryAreRejected) {
  FileRendezvous rdv(TempDir(), 0, 1);
  EXPECT_EQ(rdv.AllGather("../x", "v", absl::Seconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rdv.AllGather("a b", "v", absl::Seconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rdv.AllGather("ok/key-1.2_3", "v", absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace det::collective
