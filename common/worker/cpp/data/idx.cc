#include "common/worker/cpp/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status/status_macros.h"

namespace det::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions.
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension.
constexpr uint32_t kMaxSide = 1 << 16;
constexpr uint32_t kMaxCount = INT32_MAX;
constexpr size_t kReadChunk = size_t{1} << 24;

uint32_t BigEndianU32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// An open gzip (or plain) file; closes it on destruction.
class GzReader {
 public:
  static absl::StatusOr<GzReader> Open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      const int err = errno;
      if (err == 0) return absl::ResourceExhaustedError(absl::StrCat(path, ": gzopen failed"));
      return absl::ErrnoToStatus(err, absl::StrCat(path, ": cannot open"));
    }
    gzbuffer(file, 1 << 20);
    return GzReader(path, file);
  }

  GzReader(GzReader&& other) noexcept
      : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  GzReader& operator=(GzReader&&) = delete;
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }

  // Appends exactly `n` bytes of `what` to `out`, or fails with kDataLoss naming how
  // many bytes there were.
  absl::Status ReadExactly(uint64_t n, const char* what, std::vector<uint8_t>* out) {
    const size_t start = out->size();
    out->reserve(start + std::min<uint64_t>(n, size_t{1} << 28));
    uint64_t got = 0;
    while (got < n) {
      const size_t chunk = std::min<uint64_t>(n - got, kReadChunk);
      out->resize(start + got + chunk);
      const int r = gzread(file_, out->data() + start + got, static_cast<unsigned>(chunk));
      if (r < 0) return StreamError(what);
      got += r;
      if (static_cast<size_t>(r) < chunk) break;
    }
    out->resize(start + got);
    if (got < n) {
      return absl::DataLossError(absl::StrFormat("%s: expected %d bytes of %s, got %d%s", path_, n,
                                                 what, got, ErrorSuffix()));
    }
    return absl::OkStatus();
  }

  // Fails with kDataLoss if anything follows the `expected` bytes already read.
  absl::Status ExpectEnd(uint64_t expected) {
    uint8_t byte;
    const int r = gzread(file_, &byte, 1);
    if (r < 0) return StreamError("trailing data check");
    if (r > 0) {
      return absl::DataLossError(
          absl::StrFormat("%s: unexpected trailing data after %d bytes", path_, expected));
    }
    return absl::OkStatus();
  }

  // Reads and checks the magic number, then reads `dims` big-endian uint32 dimensions.
  absl::StatusOr<std::vector<uint32_t>> ReadHeader(uint32_t magic, const char* kind, int dims) {
    std::vector<uint8_t> bytes;
    RETURN_IF_ERROR(ReadExactly(4, "magic number", &bytes));
    if (const uint32_t found = BigEndianU32(bytes.data()); found != magic) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: bad magic number 0x%08x, expected 0x%08x (%s)", path_, found, magic, kind));
    }
    bytes.clear();
    RETURN_IF_ERROR(ReadExactly(4 * dims, "header", &bytes));
    std::vector<uint32_t> sizes;
    for (int i = 0; i < dims; ++i) sizes.push_back(BigEndianU32(&bytes[4 * i]));
    return sizes;
  }

  const std::string& path() const { return path_; }

 private:
  GzReader(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  std::string ErrorSuffix() {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_OK || message == nullptr || *message == '\0') return "";
    return absl::StrCat(" (", message, ")");
  }

  absl::Status StreamError(const char* what) {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_ERRNO) {
      return absl::ErrnoToStatus(errno, absl::StrCat(path_, ": reading ", what));
    }
    return absl::DataLossError(absl::StrCat(path_, ": corrupt data while reading ", what, ": ",
                                            message == nullptr ? "" : message));
  }

  std::string path_;
  gzFile file_;
};

// FNV-1a, 64-bit.
class Fnv1a {
 public:
  void Add(uint8_t byte) {
    hash_ ^= byte;
    hash_ *= 0x100000001b3ULL;
  }
  void AddU64(uint64_t v) {
    for (int i = 0; i < 8; ++i) Add(static_cast<uint8_t>(v >> (8 * i)));
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  ASSIGN_OR_RETURN(GzReader reader, GzReader::Open(path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> dims,
                   reader.ReadHeader(kImagesMagic, "IDX3 unsigned-byte images", 3));
  if (dims[0] > kMaxCount || dims[1] == 0 || dims[1] > kMaxSide || dims[2] == 0 ||
      dims[2] > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: implausible image dimensions %d x %d x %d", path, dims[0], dims[1], dims[2]));
  }
  IdxImages images;
  images.count = dims[0];
  images.rows = static_cast<int>(dims[1]);
  images.cols = static_cast<int>(dims[2]);
  const uint64_t bytes = uint64_t{dims[0]} * dims[1] * dims[2];
  RETURN_IF_ERROR(reader.ReadExactly(bytes, "image data", &images.pixels));
  RETURN_IF_ERROR(reader.ExpectEnd(16 + bytes));
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  ASSIGN_OR_RETURN(GzReader reader, GzReader::Open(path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> dims,
                   reader.ReadHeader(kLabelsMagic, "IDX1 unsigned-byte labels", 1));
  if (dims[0] > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: implausible label count %d", path, dims[0]));
  }
  std::vector<uint8_t> labels;
  RETURN_IF_ERROR(reader.ReadExactly(dims[0], "label data", &labels));
  RETURN_IF_ERROR(reader.ExpectEnd(8 + uint64_t{dims[0]}));
  return labels;
}

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path) {
  ASSIGN_OR_RETURN(IdxImages raw, ReadIdxImages(images_path));
  ASSIGN_OR_RETURN(std::vector<uint8_t> labels, ReadIdxLabels(labels_path));
  if (static_cast<int64_t>(labels.size()) != raw.count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("example count mismatch: %s has %d images but %s has %d labels",
                        images_path, raw.count, labels_path, labels.size()));
  }
  Dataset dataset;
  dataset.num_examples = raw.count;
  dataset.rows = raw.rows;
  dataset.cols = raw.cols;
  dataset.images.resize(raw.pixels.size());
  for (size_t i = 0; i < raw.pixels.size(); ++i) {
    dataset.images[i] = static_cast<float>(raw.pixels[i]) / 255.0f;
  }
  dataset.labels = std::move(labels);
  return dataset;
}

uint64_t Dataset::Fingerprint() const {
  constexpr uint64_t kMaxSamples = 1 << 16;
  Fnv1a fnv;
  fnv.AddU64(static_cast<uint64_t>(num_examples));
  fnv.AddU64(static_cast<uint64_t>(rows));
  fnv.AddU64(static_cast<uint64_t>(cols));
  for (uint8_t label : labels) fnv.Add(label);
  const uint64_t total = images.size();
  const uint64_t samples = std::min(total, kMaxSamples);
  const uint64_t stride = samples == 0 ? 0 : total / samples;
  const uint64_t remainder = samples == 0 ? 0 : total % samples;
  for (uint64_t k = 0; k < samples; ++k) {
    // Index floor(k * total / samples), computed without overflow.
    const float pixel = images[k * stride + k * remainder / samples];
    uint32_t bits;
    std::memcpy(&bits, &pixel, sizeof(bits));
    fnv.AddU64(bits);
  }
  return fnv.hash();
}

}  // namespace det::data
