// A Rendezvous through files in one directory, for processes that share a filesystem
// (tests and benchmarks on one machine; never used by trials, which rendezvous through
// the master). Rank r of round `key` writes <dir>/<key>/<r> atomically (temp + rename)
// and polls for the others.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_FILE_RENDEZVOUS_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_FILE_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "common/worker/cpp/collective/rendezvous.h"

namespace det::collective {

class FileRendezvous : public Rendezvous {
 public:
  // `dir` must exist and be writable by every rank. REQUIRES: 0 <= rank < size.
  FileRendezvous(std::string dir, int rank, int size);

  // Keys may contain [A-Za-z0-9._-] and '/', not "..". InvalidArgument otherwise;
  // errno-based errors naming the path when a file cannot be written or read.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& key,
                                                     const std::string& value,
                                                     absl::Duration timeout) override;

 private:
  std::string dir_;
  int rank_;
  int size_;
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_FILE_RENDEZVOUS_H_
