#include "agent/context_cache.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/rpc/context_sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

class ContextCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/context_cache_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/contexts";
    context_.add_files()->set_path("train.py");
    context_.mutable_files(0)->set_content("print('hi')\n");
    blob_ = context_.SerializeAsString();
    ref_.set_experiment_id(5);
    ref_.set_sha256(rpc::ContextSha256(blob_));
  }

  // A fetch that answers `blob` with `sha256` and counts its calls.
  ContextCache::Fetch Serving(std::string blob, std::string sha256) {
    return [this, blob, sha256]() -> absl::StatusOr<v1::GetModelContextResponse> {
      ++fetches_;
      v1::GetModelContextResponse resp;
      resp.set_model_context(blob);
      resp.set_sha256(sha256);
      return resp;
    };
  }

  std::string dir_;
  v1::ModelContext context_;
  std::string blob_;
  v1::ModelContextRef ref_;
  int fetches_ = 0;
};

TEST_F(ContextCacheTest, AFetchedContextIsKeptUnderItsHashAndReadBackChecked) {
  ContextCache cache(dir_);
  absl::StatusOr<v1::ModelContext> got = cache.Get(ref_, Serving(blob_, ref_.sha256()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->files(0).path(), "train.py");
  got = cache.Get(ref_, Serving(blob_, ref_.sha256()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->files(0).content(), "print('hi')\n");
  EXPECT_EQ(fetches_, 1);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  ASSERT_EQ(stat((dir_ + "/" + ref_.sha256()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  // A damaged file is not trusted: fetched again.
  std::ofstream(dir_ + "/" + ref_.sha256(), std::ios::trunc) << "garbage";
  got = cache.Get(ref_, Serving(blob_, ref_.sha256()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->files(0).path(), "train.py");
  EXPECT_EQ(fetches_, 2);
}

TEST_F(ContextCacheTest, AContextWithAnotherHashThanTheLaunchNamesIsRefused) {
  ContextCache cache(dir_);
  absl::StatusOr<v1::ModelContext> got =
      cache.Get(ref_, Serving("other", rpc::ContextSha256("other")));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(),
              HasSubstr("the master sent the model context of experiment 5 with SHA-256 "));
}

TEST_F(ContextCacheTest, AFailedFetchNamesTheExperimentAndKeepsTheMastersCode) {
  ContextCache cache(dir_);
  absl::StatusOr<v1::ModelContext> got =
      cache.Get(ref_, []() -> absl::StatusOr<v1::GetModelContextResponse> {
        return absl::PermissionDeniedError("not placed here");
      });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(got.status().message(),
            "cannot fetch the model context of experiment 5: not placed here");
}

TEST_F(ContextCacheTest, AnUnknownHashIsFetchedEveryTimeAndNothingIsKept) {
  ContextCache cache(dir_);
  ref_.clear_sha256();
  ASSERT_TRUE(cache.Get(ref_, Serving(blob_, rpc::ContextSha256(blob_))).ok());
  ASSERT_TRUE(cache.Get(ref_, Serving(blob_, rpc::ContextSha256(blob_))).ok());
  EXPECT_EQ(fetches_, 2);
}

TEST_F(ContextCacheTest, OnlyTheNewestAreKept) {
  ContextCache cache(dir_, /*keep=*/2);
  for (int i = 0; i < 3; ++i) {
    v1::ModelContext c;
    c.add_files()->set_path("f" + std::to_string(i));
    std::string blob = c.SerializeAsString();
    v1::ModelContextRef ref;
    ref.set_sha256(rpc::ContextSha256(blob));
    ASSERT_TRUE(cache.Get(ref, Serving(blob, ref.sha256())).ok());
  }
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

}  // namespace
}  // namespace det::agent
