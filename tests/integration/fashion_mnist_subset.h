// A smaller Fashion-MNIST for integration tests whose trials' assertions do not depend on
// the data set's size (reports, checkpoints, stops, resumes): loading the full set (60,000
// + 10,000 images, gzip) and validating over 10,000 images is most of such a trial's CPU
// time on a CPU slot.
#ifndef DET_TESTS_INTEGRATION_FASHION_MNIST_SUBSET_H_
#define DET_TESTS_INTEGRATION_FASHION_MNIST_SUBSET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace det::testing {

// Debian's dataset-fashion-mnist.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Writes the first `train` records of `source`'s training set and the first `test` of its
// test set into directory `dir` (which must exist), under the same four file names and in
// the same format (gzip-compressed IDX), so that a config's `data.dir: <dir>` reads them as
// it reads the full set. Errors name the file and what is wrong (kNotFound: a source file
// missing; kInvalidArgument: a bad header or more records asked for than there are).
absl::Status WriteFashionMnistSubset(const std::string& source, const std::string& dir,
                                     int64_t train, int64_t test);

}  // namespace det::testing

#endif  // DET_TESTS_INTEGRATION_FASHION_MNIST_SUBSET_H_
