// Averages a model's gradient buffer over the ranks of a data-parallel run, fused into
// buckets, with optimizations.aggregation_frequency.
//
// The buffer is cut into buckets of about `bucket_bytes`, counted from its end: layered
// models lay parameters out first layer first, and backward produces the last layer's
// gradients first, so the first bucket to fill is the one at the end. As backward marks
// ranges final (MarkReady), every bucket whose elements are all final is all-reduced on
// a communication thread while backward goes on with earlier layers (as PyTorch DDP
// does); the buckets completed by the last MarkReady() have nothing left to overlap
// with and Finish() reduces them on the caller's thread. A model that produces its whole
// gradient at once marks it in one call and gets one all-reduce per bucket, without a
// thread hand-over.
//
// With aggregation frequency k, the gradients of k batches are summed locally and
// all-reduced once, on the k-th (the "sync" batch); the optimizer steps only then, on the
// mean over k batches and every rank. The first k-1 batches of a group cost no
// communication.
//
// REQUIRES: every rank makes the same calls with the same ranges in the same order (so
// that buckets fill, and are reduced, in the same order everywhere). Between the first
// MarkReady() of a sync batch and its Finish(), the collective belongs to the
// communication thread: do not use it elsewhere. One thread calls the methods.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_GRADIENT_REDUCER_H_
#define DET_COMMON_WORKER_CPP_HARNESS_GRADIENT_REDUCER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/worker/cpp/collective/collective.h"

namespace det::harness {

// Element-wise arithmetic on gradient buffers in the memory where they live: the host
// (NewHostGradientMath) or a CUDA device (CudaGradientMath). Each call has finished when it
// returns. Safe to call from the caller's and the communication thread at once.
class GradientMath {
 public:
  virtual ~GradientMath() = default;
  // A zeroed buffer of `n` floats in the gradients' memory, owned by this object.
  virtual absl::StatusOr<absl::Span<float>> NewBuffer(size_t n) = 0;
  // dst += src, then src = 0.
  virtual absl::Status MoveAdd(absl::Span<float> dst, absl::Span<float> src) = 0;
  // dst += src.
  virtual absl::Status Add(absl::Span<float> dst, absl::Span<const float> src) = 0;
  // data *= factor.
  virtual absl::Status Scale(absl::Span<float> data, float factor) = 0;
};

// GradientMath on host memory; its buffers live as long as it does.
std::unique_ptr<GradientMath> NewHostGradientMath();

struct GradientReducerOptions {
  // Target size of one bucket. Default: 64 MiB (Determined's tensor_fusion_threshold).
  int64_t bucket_bytes = int64_t{64} << 20;
  // All-reduce every k batches. REQUIRES: >= 1.
  int aggregation_frequency = 1;
  // Reduce buckets on a communication thread as they fill. When false, Finish() reduces
  // every bucket on the caller's thread.
  bool overlap = true;
  // Arithmetic for `grads`' memory; null: host memory (the reducer's own). Must outlive
  // the reducer.
  GradientMath* math = nullptr;
};

class GradientReducer {
 public:
  // `grads` is the model's gradient buffer, which backward overwrites every batch;
  // `collective` and options.math work on its memory (host, or the CUDA device). Both
  // must outlive the reducer.
  GradientReducer(collective::Collective& collective, absl::Span<float> grads,
                  GradientReducerOptions options);
  ~GradientReducer();

  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // [begin, end) of each bucket, in the order they are reduced.
  const std::vector<std::pair<size_t, size_t>>& buckets() const { return buckets_; }

  // Whether the batch about to run ends an aggregation group.
  bool IsSyncBatch() const { return (batch_ + 1) % options_.aggregation_frequency == 0; }

  // Marks grads[begin, end) final for this batch. REQUIRES: ranges of one batch do not
  // overlap and together cover the buffer by Finish().
  void MarkReady(size_t begin, size_t end);

  // Ends the batch. Returns true on a sync batch: grads() then hold the mean over the
  // group's batches and every rank, and the caller steps the optimizer. Returns false
  // otherwise: the batch's gradients were added to the group's sum, grads() are
  // unchanged, and the caller does not step. Errors are the collective's (the run
  // cannot go on).
  absl::StatusOr<bool> Finish();

 private:
  void CommThread();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  // enqueued_ is written only by the caller's thread, which is the one waiting here.
  bool AllReduced() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return reduced_ >= enqueued_; }
  absl::Status Reduce(size_t bucket);

  collective::Collective& collective_;
  absl::Span<float> grads_;
  const GradientReducerOptions options_;
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<size_t> ready_;     // per bucket: elements marked this batch
  size_t full_ = 0;               // buckets complete this batch
  std::vector<size_t> deferred_;  // complete buckets that Finish() reduces itself
  std::unique_ptr<GradientMath> host_math_;  // when options.math is null
  GradientMath& math_;
  absl::Span<float> sum_;         // the group's sum (aggregation_frequency > 1)
  absl::Status math_status_;      // the first failure of math_ on the caller's thread
  int64_t batch_ = 0;
  size_t enqueued_ = 0;

  absl::Mutex mu_;
  std::deque<size_t> queue_ ABSL_GUARDED_BY(mu_);
  size_t reduced_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread comm_;
};

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_GRADIENT_REDUCER_H_
