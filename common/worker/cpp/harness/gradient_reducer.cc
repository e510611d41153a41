#include "common/worker/cpp/harness/gradient_reducer.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"

namespace det::harness {
namespace {

class HostMath : public GradientMath {
 public:
  absl::StatusOr<absl::Span<float>> NewBuffer(size_t n) override {
    absl::MutexLock l(&mu_);
    buffers_.emplace_back(n, 0.0f);
    return absl::MakeSpan(buffers_.back());
  }
  absl::Status MoveAdd(absl::Span<float> dst, absl::Span<float> src) override {
    for (size_t i = 0; i < dst.size(); ++i) {
      dst[i] += src[i];
      src[i] = 0.0f;
    }
    return absl::OkStatus();
  }
  absl::Status Add(absl::Span<float> dst, absl::Span<const float> src) override {
    for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
    return absl::OkStatus();
  }
  absl::Status Scale(absl::Span<float> data, float factor) override {
    for (float& g : data) g *= factor;
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::deque<std::vector<float>> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<GradientMath> NewHostGradientMath() { return std::make_unique<HostMath>(); }

GradientReducer::GradientReducer(collective::Collective& collective, absl::Span<float> grads,
                                 GradientReducerOptions options)
    : collective_(collective),
      grads_(grads),
      options_(options),
      host_math_(options.math != nullptr ? nullptr : NewHostGradientMath()),
      math_(options.math != nullptr ? *options.math : *host_math_) {
  const size_t per = std::max<size_t>(1, static_cast<size_t>(options_.bucket_bytes) / sizeof(float));
  for (size_t end = grads_.size(); end > 0;) {
    size_t begin = end > per ? end - per : 0;
    buckets_.push_back({begin, end});
    end = begin;
  }
  ready_.assign(buckets_.size(), 0);
  if (options_.aggregation_frequency > 1) {
    absl::StatusOr<absl::Span<float>> sum = math_.NewBuffer(grads_.size());
    if (sum.ok()) {
      sum_ = *sum;
    } else {
      math_status_ = sum.status();
    }
  }
  if (options_.overlap && collective_.size() > 1) comm_ = std::thread([this] { CommThread(); });
}

GradientReducer::~GradientReducer() {
  if (!comm_.joinable()) return;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  comm_.join();
}

void GradientReducer::MarkReady(size_t begin, size_t end) {
  end = std::min(end, grads_.size());
  if (begin >= end) return;
  if (options_.aggregation_frequency > 1 && math_status_.ok()) {
    absl::Span<float> sum = sum_.subspan(begin, end - begin);
    absl::Span<float> grads = grads_.subspan(begin, end - begin);
    if (!IsSyncBatch()) {
      math_status_ = math_.Add(sum, grads);
      return;
    }
    math_status_ = math_.MoveAdd(grads, sum);
  } else if (!IsSyncBatch()) {
    return;
  }
  const size_t per = buckets_.front().second - buckets_.front().first;
  const size_t n = grads_.size();
  const size_t first = (n - end) / per;       // bucket holding end - 1
  const size_t last = (n - 1 - begin) / per;  // bucket holding begin
  std::vector<size_t> filled;
  for (size_t b = first; b <= last && b < buckets_.size(); ++b) {
    const auto [lo, hi] = buckets_[b];
    ready_[b] += std::min(end, hi) - std::max(begin, lo);
    if (ready_[b] == hi - lo) filled.push_back(b);
  }
  full_ += filled.size();
  // Buckets that fill while backward still has work left go to the communication
  // thread; those that fill last have nothing to overlap with and are reduced by
  // Finish() on this thread, sparing a hand-over. The split depends only on the calls,
  // so it is the same on every rank.
  const bool overlap = comm_.joinable() && full_ < buckets_.size();
  for (size_t b : filled) {
    if (overlap) {
      ++enqueued_;
      absl::MutexLock l(&mu_);
      queue_.push_back(b);
    } else {
      deferred_.push_back(b);
    }
  }
}

void GradientReducer::CommThread() {
  absl::MutexLock l(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &GradientReducer::HasWorkOrStopping));
    if (stopping_) return;
    size_t b = queue_.front();
    queue_.pop_front();
    bool ok = status_.ok();
    mu_.Unlock();
    absl::Status st = ok ? Reduce(b) : absl::OkStatus();
    mu_.Lock();
    if (status_.ok()) status_ = st;
    ++reduced_;
  }
}

absl::Status GradientReducer::Reduce(size_t bucket) {
  const auto [lo, hi] = buckets_[bucket];
  absl::Span<float> part = grads_.subspan(lo, hi - lo);
  if (collective_.size() > 1) {
    if (absl::Status st = collective_.AllReduceSum(part); !st.ok()) return st;
  }
  const int divisor = collective_.size() * options_.aggregation_frequency;
  if (divisor > 1) return math_.Scale(part, 1.0f / static_cast<float>(divisor));
  return absl::OkStatus();
}

absl::StatusOr<bool> GradientReducer::Finish() {
  const bool sync = IsSyncBatch();
  ++batch_;
  if (!math_status_.ok()) return math_status_;
  if (!sync) return false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (ready_[b] != buckets_[b].second - buckets_[b].first) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gradient reducer: elements [", buckets_[b].first, ", ", buckets_[b].second,
          ") were not all marked ready before Finish()"));
    }
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  full_ = 0;
  absl::Status status;
  if (comm_.joinable()) {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(this, &GradientReducer::AllReduced));
    reduced_ = 0;
    status = status_;
  }
  // After the communication thread's buckets, in the order they filled.
  for (size_t i = 0; i < deferred_.size() && status.ok(); ++i) status = Reduce(deferred_[i]);
  deferred_.clear();
  enqueued_ = 0;
  if (!status.ok()) return status;
  return true;
}

}  // namespace det::harness
