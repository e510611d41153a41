#include "tests/integration/fashion_mnist_subset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// The first `n` bytes of the gzip file `path`, uncompressed (fewer if it is shorter).
std::vector<uint8_t> Head(const std::string& path, size_t n) {
  std::vector<uint8_t> out(n);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  int got = gzread(f, out.data(), n);
  gzclose(f);
  out.resize(got < 0 ? 0 : got);
  return out;
}

std::string TempDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(FashionMnistSubset, WritesTheFirstRecordsWithTheirCountInTheHeader) {
  const std::string dir = TempDir("subset");
  ASSERT_TRUE(WriteFashionMnistSubset(kFashionMnistDir, dir, 100, 20).ok());
  const std::string images = dir + "/train-images-idx3-ubyte.gz";
  std::vector<uint8_t> written = Head(images, 1 << 20);
  ASSERT_EQ(written.size(), 16u + 100 * 28 * 28);
  // Magic, count 100, 28 x 28; then the source's first 100 images, byte for byte.
  EXPECT_EQ(std::vector<uint8_t>(written.begin(), written.begin() + 16),
            (std::vector<uint8_t>{0, 0, 8, 3, 0, 0, 0, 100, 0, 0, 0, 28, 0, 0, 0, 28}));
  std::vector<uint8_t> source =
      Head(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz", written.size());
  EXPECT_TRUE(std::equal(written.begin() + 16, written.end(), source.begin() + 16));
  std::vector<uint8_t> labels = Head(dir + "/t10k-labels-idx1-ubyte.gz", 1 << 10);
  ASSERT_EQ(labels.size(), 8u + 20);
  EXPECT_EQ(std::vector<uint8_t>(labels.begin(), labels.begin() + 8),
            (std::vector<uint8_t>{0, 0, 8, 1, 0, 0, 0, 20}));
  EXPECT_EQ(Head(dir + "/t10k-images-idx3-ubyte.gz", 1 << 20).size(), 16u + 20 * 28 * 28);
  EXPECT_EQ(Head(dir + "/train-labels-idx1-ubyte.gz", 1 << 10).size(), 8u + 100);
}

TEST(FashionMnistSubset, ErrorsNameTheFile) {
  const std::string dir = TempDir("errors");
  absl::Status missing = WriteFashionMnistSubset(dir + "/nowhere", dir, 10, 10);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("nowhere/train-images-idx3-ubyte.gz"));
  absl::Status too_many = WriteFashionMnistSubset(kFashionMnistDir, dir, 10, 10001);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("t10k-images-idx3-ubyte.gz: asked for 10001 records of 10000"));
}

}  // namespace
}  // namespace det::testing
