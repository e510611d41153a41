// Reading IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain.
//
// An IDX file is a big-endian header (magic 0x000008NN with NN the number of
// dimensions, then one uint32 per dimension) followed by unsigned bytes. Images
// are 3-d (count, rows, cols), labels 1-d (count).
//
// Errors name the file and what is wrong:
//   kNotFound / errno codes  the file cannot be opened
//   kInvalidArgument         bad magic number, implausible dimensions, or images and
//                            labels that disagree on the number of examples
//   kDataLoss                truncated data, trailing data, corrupt gzip stream
#ifndef DET_COMMON_WORKER_CPP_DATA_IDX_H_
#define DET_COMMON_WORKER_CPP_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace det::data {

// Raw unsigned-byte images as stored in an IDX3 file.
struct IdxImages {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, example-major, row-major.
};

// A labelled image data set ready for training.
struct Dataset {
  int64_t num_examples = 0;
  int rows = 0;
  int cols = 0;
  std::vector<float> images;    // num_examples * rows * cols, pixel / 255 in [0, 1].
  std::vector<uint8_t> labels;  // num_examples.

  int64_t example_size() const { return int64_t{rows} * cols; }

  // A cheap 64-bit fingerprint (FNV-1a over the shape, every label and an evenly
  // spaced sample of at most 65536 pixels). Equal data sets give equal values on every
  // platform; it is for detecting a different data set, not for security.
  uint64_t Fingerprint() const;
};

// Reads an IDX3 unsigned-byte file (magic 0x00000803).
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);

// Reads an IDX1 unsigned-byte file (magic 0x00000801).
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

// Reads an images file and its labels file and checks they hold the same number of
// examples.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path);

}  // namespace det::data

#endif  // DET_COMMON_WORKER_CPP_DATA_IDX_H_
