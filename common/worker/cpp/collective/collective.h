// Collective operations among the ranks of one training run, behind one interface:
// GlooCollective (TCP, host memory), NcclCollective (CUDA device memory), and
// LocalCollective (a world of one). See docs/distributed-training.md for the design.
//
// Contract shared by every implementation:
//  - Every rank calls the same operations, in the same order, with the same element
//    counts (and the same root). Mismatches are undefined behaviour at the transport
//    level; implementations detect what they cheaply can.
//  - Buffers live where device() says: host memory for kHost, CUDA device memory (of
//    the device the collective was created for) for kCuda.
//  - Calls block until the operation has completed on this rank.
//  - After any failure (a peer exited, a connection broke, a timeout) the collective is
//    unusable: that call and every later one return an error (kAborted for a peer or
//    transport failure, kDeadlineExceeded for a timeout) whose message names the
//    operation, this rank and the cause.
//
// Thread-compatible: one thread at a time (callers that hand a collective to a
// communication thread must not use it from another thread meanwhile).
#ifndef DET_COMMON_WORKER_CPP_COLLECTIVE_COLLECTIVE_H_
#define DET_COMMON_WORKER_CPP_COLLECTIVE_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace det::collective {

enum class Device { kHost, kCuda };

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl" or "local".
  virtual std::string backend() const = 0;
  virtual Device device() const = 0;

  // Replaces `data` on every rank by the element-wise sum over all ranks. Float sums
  // are bit-identical on every rank (each element is reduced once and then copied);
  // int64 sums are exact and independent of the number and order of ranks.
  virtual absl::Status AllReduceSum(absl::Span<float> data) = 0;
  virtual absl::Status AllReduceSum(absl::Span<int64_t> data) = 0;

  // Copies `bytes` bytes at `data` from rank `root` to every rank.
  // REQUIRES: 0 <= root < size().
  virtual absl::Status BroadcastBytes(void* data, size_t bytes, int root) = 0;

  // Returns once every rank has entered Barrier().
  virtual absl::Status Barrier() = 0;

  // Typed convenience over BroadcastBytes().
  template <typename T>
  absl::Status Broadcast(absl::Span<T> data, int root) {
    return BroadcastBytes(static_cast<void*>(data.data()), data.size() * sizeof(T), root);
  }
};

}  // namespace det::collective

#endif  // DET_COMMON_WORKER_CPP_COLLECTIVE_COLLECTIVE_H_
