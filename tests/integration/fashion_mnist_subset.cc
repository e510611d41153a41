#include "tests/integration/fashion_mnist_subset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace det::testing {
namespace {

// Copies the IDX header of `from` (magic 0x000008NN, NN dimensions) with the first
// dimension set to `records`, then the first `records` records' bytes, into `to`
// (gzip, fastest level).
absl::Status CopyIdxPrefix(const std::string& from, const std::string& to, int64_t records) {
  errno = 0;
  gzFile in = gzopen(from.c_str(), "rb");
  if (in == nullptr) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat(from, ": not found"))
                           : absl::ErrnoToStatus(errno, absl::StrCat(from, ": cannot open"));
  }
  uint8_t magic[4];
  if (gzread(in, magic, 4) != 4 || magic[0] != 0 || magic[1] != 0 || magic[2] != 8 ||
      magic[3] < 1 || magic[3] > 3) {
    gzclose(in);
    return absl::InvalidArgumentError(absl::StrCat(from, ": not an unsigned-byte IDX file"));
  }
  const int dims = magic[3];
  std::vector<uint8_t> header(4 * dims);
  if (gzread(in, header.data(), header.size()) != static_cast<int>(header.size())) {
    gzclose(in);
    return absl::InvalidArgumentError(absl::StrCat(from, ": truncated IDX header"));
  }
  auto dim = [&](int i) {
    const uint8_t* p = &header[4 * i];
    return int64_t{p[0]} << 24 | int64_t{p[1]} << 16 | int64_t{p[2]} << 8 | int64_t{p[3]};
  };
  if (records < 1 || records > dim(0)) {
    gzclose(in);
    return absl::InvalidArgumentError(
        absl::StrCat(from, ": asked for ", records, " records of ", dim(0)));
  }
  int64_t record_size = 1;
  for (int i = 1; i < dims; ++i) record_size *= dim(i);
  std::vector<uint8_t> body(records * record_size);
  const int got = gzread(in, body.data(), body.size());
  gzclose(in);
  if (got != static_cast<int>(body.size())) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": truncated data"));
  }
  for (int shift = 0; shift < 4; ++shift) header[3 - shift] = (records >> (8 * shift)) & 0xff;

  gzFile out = gzopen(to.c_str(), "wb1");
  if (out == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat(to, ": cannot create"));
  const bool written = gzwrite(out, magic, 4) == 4 &&
                       gzwrite(out, header.data(), header.size()) ==
                           static_cast<int>(header.size()) &&
                       gzwrite(out, body.data(), body.size()) == static_cast<int>(body.size());
  if (gzclose(out) != Z_OK || !written) {
    return absl::DataLossError(absl::StrCat(to, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFashionMnistSubset(const std::string& source, const std::string& dir,
                                     int64_t train, int64_t test) {
  for (const auto& [split, records] : {std::pair<const char*, int64_t>{"train", train},
                                       std::pair<const char*, int64_t>{"t10k", test}}) {
    for (const char* kind : {"images-idx3", "labels-idx1"}) {
      const std::string name = absl::StrCat("/", split, "-", kind, "-ubyte.gz");
      absl::Status st = CopyIdxPrefix(source + name, dir + name, records);
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace det::testing
