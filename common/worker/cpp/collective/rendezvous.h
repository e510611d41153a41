// How the ranks of a run find each other before a collective exists: an all-gather of
// one small binary value per rank under a key. In a trial the master serves it
// (harness::MasterRendezvous, WorkerService.Rendezvous), so ranks on different machines
// need nothing shared but the master; FileRendezvous serves tests and benchmarks on one
// machine.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_RENDEZVOUS_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace det::collective {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  // Publishes `value` (any bytes) as this rank's entry of the round named `key` and
  // returns every rank's entry, indexed by rank, once all ranks of the world have
  // published. A key names one round for one membership: use a fresh key (a new
  // generation prefix) for every run. DeadlineExceeded, naming the key and the ranks
  // still missing where known, when not every rank arrived within `timeout`.
  // Thread-compatible.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& key,
                                                             const std::string& value,
                                                             absl::Duration timeout) = 0;
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_RENDEZVOUS_H_
