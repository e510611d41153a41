#include "common/worker/cpp/data/idx.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : ::testing::TempDir().c_str()) + "/" + name;
}

void PutU32(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

std::string ImagesFile(uint32_t count, uint32_t rows, uint32_t cols, const std::string& pixels) {
  std::string out;
  PutU32(0x00000803, &out);
  PutU32(count, &out);
  PutU32(rows, &out);
  PutU32(cols, &out);
  return out + pixels;
}

std::string LabelsFile(uint32_t count, const std::string& labels) {
  std::string out;
  PutU32(0x00000801, &out);
  PutU32(count, &out);
  return out + labels;
}

// Writes `contents` gzip-compressed to a fresh file in the test's temp dir.
std::string WriteGz(const std::string& name, const std::string& contents) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f == nullptr) return path;
  if (!contents.empty()) {
    EXPECT_EQ(gzwrite(f, contents.data(), contents.size()), static_cast<int>(contents.size()));
  }
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

void WriteFile(const std::string& path, const std::string& contents) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
  std::fclose(f);
}

// 3 images of 2 x 3 pixels.
const std::string kPixels = std::string("\x00\x01\x02\x03\x04\xff", 6) +
                            std::string("\x10\x20\x30\x40\x50\x60", 6) +
                            std::string("\xff\xfe\xfd\x00\x00\x80", 6);
const std::string kLabels("\x07\x00\x09", 3);

TEST(IdxTest, LoadsDatasetScaledToUnitInterval) {
  const std::string images = WriteGz("ok-images.gz", ImagesFile(3, 2, 3, kPixels));
  const std::string labels = WriteGz("ok-labels.gz", LabelsFile(3, kLabels));
  absl::StatusOr<Dataset> dataset = LoadIdxDataset(images, labels);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->num_examples, 3);
  EXPECT_EQ(dataset->rows, 2);
  EXPECT_EQ(dataset->cols, 3);
  EXPECT_EQ(dataset->example_size(), 6);
  ASSERT_EQ(dataset->images.size(), 18u);
  EXPECT_FLOAT_EQ(dataset->images[0], 0.0f);
  EXPECT_FLOAT_EQ(dataset->images[1], 1.0f / 255.0f);
  EXPECT_FLOAT_EQ(dataset->images[5], 1.0f);
  EXPECT_FLOAT_EQ(dataset->images[17], 128.0f / 255.0f);
  EXPECT_THAT(dataset->labels, ElementsAre(7, 0, 9));
}

TEST(IdxTest, ReadsRawImagesAndLabels) {
  const std::string images = WriteGz("raw-images.gz", ImagesFile(3, 2, 3, kPixels));
  absl::StatusOr<IdxImages> raw = ReadIdxImages(images);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->count, 3);
  EXPECT_EQ(std::string(raw->pixels.begin(), raw->pixels.end()), kPixels);

  const std::string labels = WriteGz("raw-labels.gz", LabelsFile(3, kLabels));
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(labels);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(7, 0, 9));
}

TEST(IdxTest, ReadsUncompressedFiles) {
  const std::string labels = TempPath("plain-labels");
  WriteFile(labels, LabelsFile(3, kLabels));
  absl::StatusOr<std::vector<uint8_t>> read = ReadIdxLabels(labels);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(7, 0, 9));
}

TEST(IdxTest, MissingFileIsNotFound) {
  const std::string path = TempPath("no-such-file.gz");
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(images.status().message(), HasSubstr(path));

  const std::string labels = WriteGz("missing-labels.gz", LabelsFile(3, kLabels));
  absl::StatusOr<Dataset> dataset = LoadIdxDataset(path, labels);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr(path));
}

TEST(IdxTest, WrongMagicNamesBothNumbers) {
  // A labels file passed as images.
  const std::string path = WriteGz("swapped.gz", LabelsFile(3, kLabels));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(images.status().message(), HasSubstr(path));
  EXPECT_THAT(images.status().message(),
              HasSubstr("bad magic number 0x00000801, expected 0x00000803"));
}

TEST(IdxTest, TruncatedImageDataSaysHowMuch) {
  const std::string path = WriteGz("short-images.gz", ImagesFile(3, 2, 3, kPixels.substr(0, 10)));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(images.status().message(), HasSubstr(path));
  EXPECT_THAT(images.status().message(), HasSubstr("expected 18 bytes of image data, got 10"));
}

TEST(IdxTest, TruncatedLabelData) {
  const std::string path = WriteGz("short-labels.gz", LabelsFile(5, kLabels));
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(labels.status().message(), HasSubstr("expected 5 bytes of label data, got 3"));
}

TEST(IdxTest, TruncatedHeader) {
  const std::string magic_only = WriteGz("short-magic.gz", std::string("\x00\x00\x08", 3));
  absl::StatusOr<IdxImages> images = ReadIdxImages(magic_only);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(images.status().message(), HasSubstr("expected 4 bytes of magic number, got 3"));

  const std::string header = WriteGz("short-header.gz", ImagesFile(3, 2, 3, "").substr(0, 9));
  images = ReadIdxImages(header);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(images.status().message(), HasSubstr("expected 12 bytes of header, got 5"));
}

TEST(IdxTest, EmptyFile) {
  const std::string path = WriteGz("empty.gz", "");
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(labels.status().message(), HasSubstr("expected 4 bytes of magic number, got 0"));
}

TEST(IdxTest, TruncatedCompressedStream) {
  // 2000 images of 1 x 1 pixel that compress poorly, cut in the middle of the gzip data.
  std::string pixels;
  uint32_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 1103515245u + 12345u;
    pixels.push_back(static_cast<char>(x >> 24));
  }
  const std::string full = WriteGz("cut-full.gz", ImagesFile(2000, 1, 1, pixels));
  const std::string compressed = ReadFile(full);
  ASSERT_GT(compressed.size(), 1000u);
  const std::string cut = TempPath("cut.gz");
  WriteFile(cut, compressed.substr(0, compressed.size() / 2));
  absl::StatusOr<IdxImages> images = ReadIdxImages(cut);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(images.status().message(), HasSubstr(cut));
  EXPECT_THAT(images.status().message(), HasSubstr("expected 2000 bytes of image data, got"));
}

TEST(IdxTest, TrailingDataIsAnError) {
  const std::string path = WriteGz("long-labels.gz", LabelsFile(2, kLabels));
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(path);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(labels.status().message(), HasSubstr("trailing data"));
}

TEST(IdxTest, ImplausibleDimensions) {
  const std::string path = WriteGz("zero-rows.gz", ImagesFile(3, 0, 3, ""));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(images.status().message(), HasSubstr("implausible image dimensions 3 x 0 x 3"));
}

TEST(IdxTest, CountMismatchNamesBothFiles) {
  const std::string images = WriteGz("mm-images.gz", ImagesFile(3, 2, 3, kPixels));
  const std::string labels = WriteGz("mm-labels.gz", LabelsFile(2, kLabels.substr(0, 2)));
  absl::StatusOr<Dataset> dataset = LoadIdxDataset(images, labels);
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("count mismatch"));
  EXPECT_THAT(dataset.status().message(), HasSubstr(images + " has 3 images"));
  EXPECT_THAT(dataset.status().message(), HasSubstr(labels + " has 2 labels"));
}

TEST(IdxTest, FingerprintIsStableAndSensitive) {
  const std::string images = WriteGz("fp-images.gz", ImagesFile(3, 2, 3, kPixels));
  const std::string labels = WriteGz("fp-labels.gz", LabelsFile(3, kLabels));
  absl::StatusOr<Dataset> a = LoadIdxDataset(images, labels);
  absl::StatusOr<Dataset> b = LoadIdxDataset(images, labels);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Fingerprint(), b->Fingerprint());

  Dataset other_label = *a;
  other_label.labels[1] = 1;
  EXPECT_NE(other_label.Fingerprint(), a->Fingerprint());
  Dataset other_pixel = *a;
  other_pixel.images[0] = 0.5f;
  EXPECT_NE(other_pixel.Fingerprint(), a->Fingerprint());
  EXPECT_NE(Dataset().Fingerprint(), a->Fingerprint());
}

}  // namespace
}  // namespace det::data
