// Collectives on CUDA device memory with NCCL. Bootstrap: rank 0 creates the
// communicator's 128-byte unique id with ncclGetUniqueId and it reaches every rank
// through a Rendezvous (in a trial, the master), so ranks on different machines share
// nothing but the master; then every rank calls ncclCommInitRankConfig on its device.
// The communicator is non-blocking so that initialization and every operation can be
// bounded by a timeout.
//
// Failure handling: a watchdog thread polls ncclCommGetAsyncError while the collective
// lives and aborts the communicator (ncclCommAbort) on an asynchronous error (e.g. a
// peer's exit breaking the network connection) or when an operation has run longer
// than `timeout`; the operation waiting for its stream then returns kAborted or
// kDeadlineExceeded instead of hanging, and so does every later call.
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_NCCL_COLLECTIVE_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_NCCL_COLLECTIVE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/worker/cpp/collective/collective.h"
#include "common/worker/cpp/collective/rendezvous.h"

namespace det::collective {

struct NcclOptions {
  // CUDA device ordinal of this rank (among the devices CUDA_VISIBLE_DEVICES leaves).
  int device = 0;
  // Longest initialization and longest single operation.
  absl::Duration timeout = absl::Minutes(5);
  // Longest wait for every rank at the rendezvous.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  // How often the watchdog looks at the communicator.
  absl::Duration watchdog_period = absl::Milliseconds(100);
};

// Size of ncclUniqueId.
inline constexpr size_t kNcclUniqueIdBytes = 128;

// The bootstrap exchange, separate from CUDA so that it is testable anywhere: rank 0
// publishes the id `make_id` returns, the others publish nothing, and every rank gets
// rank 0's id. A rank that cannot take part (`local_error` not OK: no device, a bad
// device ordinal) still publishes its error, so that every rank fails at once with a
// message naming it instead of waiting for a timeout.
absl::StatusOr<std::string> ExchangeNcclUniqueId(
    int rank, Rendezvous& rendezvous, const std::string& key, absl::Duration timeout,
    const absl::Status& local_error, const std::function<absl::StatusOr<std::string>()>& make_id);

class NcclCollective : public Collective {
 public:
  // FailedPrecondition when this machine has no usable CUDA device (no GPU, or a
  // driver that is too old), naming the CUDA runtime's reason. REQUIRES: 0 <= rank < size.
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(int rank, int size,
                                                               Rendezvous& rendezvous,
                                                               const std::string& key,
                                                               const NcclOptions& options = {});
  ~NcclCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::kCuda; }

  // Buffers are device pointers on options.device.
  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllReduceSum(absl::Span<int64_t> data) override;
  absl::Status BroadcastBytes(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;

 private:
  struct Impl;  // CUDA and NCCL handles; defined in the .cc so this header needs neither.
  NcclCollective(int rank, int size, std::unique_ptr<Impl> impl, const NcclOptions& options);

  void Watchdog();
  // Enqueues `op` (which returns an ncclResult_t as int) and waits for its stream.
  absl::Status Run(const std::string& what, const std::function<int(void* comm, void* stream)>& op);
  // Records the first failure and aborts the communicator.
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_;
  const int size_;
  const NcclOptions options_;
  absl::Mutex mu_;
  std::unique_ptr<Impl> impl_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  // When the operation in flight started; InfiniteFuture when none.
  absl::Time op_started_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::string op_name_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_NCCL_COLLECTIVE_H_
