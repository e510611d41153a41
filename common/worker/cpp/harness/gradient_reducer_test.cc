#include "common/worker/cpp/harness/gradient_reducer.h"

#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Stands in for `world` ranks that all hold the same data: a sum is `world` times the
// value. Records every all-reduce; optionally blocks the first one until released.
class FakeCollective : public collective::Collective {
 public:
  explicit FakeCollective(int world) : world_(world) {}
  int rank() const override { return 0; }
  int size() const override { return world_; }
  std::string backend() const override { return "fake"; }
  collective::Device device() const override { return collective::Device::kHost; }
  absl::Status AllReduceSum(absl::Span<float> data) override {
    {
      absl::MutexLock l(&mu_);
      sizes_.push_back(data.size());
    }
    if (first_started_ && !first_started_->HasBeenNotified()) {
      first_started_->Notify();
      release_first_->WaitForNotification();
    }
    if (!fail_.ok()) return fail_;
    for (float& v : data) v *= static_cast<float>(world_);
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(absl::Span<int64_t>) override { return absl::OkStatus(); }
  absl::Status BroadcastBytes(void*, size_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }

  std::vector<size_t> sizes() {
    absl::MutexLock l(&mu_);
    return sizes_;
  }
  absl::Notification* first_started_ = nullptr;
  absl::Notification* release_first_ = nullptr;
  absl::Status fail_;

 private:
  int world_;
  absl::Mutex mu_;
  std::vector<size_t> sizes_;
};

TEST(GradientReducer, BucketsAreCutFromTheEndOfTheBuffer) {
  FakeCollective c(2);
  std::vector<float> g(10, 1.0f);
  GradientReducerOptions o;
  o.bucket_bytes = 4 * sizeof(float);
  GradientReducer r(c, absl::MakeSpan(g), o);
  EXPECT_THAT(r.buckets(), ElementsAre(Pair(6, 10), Pair(2, 6), Pair(0, 2)));
}

TEST(GradientReducer, AveragesOverRanksInOneAllReducePerBucket) {
  FakeCollective c(4);
  std::vector<float> g = {1, 2, 3, 4, 5, 6};
  GradientReducerOptions o;
  o.bucket_bytes = 3 * sizeof(float);
  GradientReducer r(c, absl::MakeSpan(g), o);
  r.MarkReady(0, 6);
  auto sync = r.Finish();
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_TRUE(*sync);
  EXPECT_THAT(g, ElementsAre(1, 2, 3, 4, 5, 6));  // (4 x value) / 4 ranks
  EXPECT_THAT(c.sizes(), ElementsAre(3, 3));
}

TEST(GradientReducer, ABucketIsReducedAsSoonAsItFillsWhileBackwardGoesOn) {
  FakeCollective c(2);
  absl::Notification started, release;
  c.first_started_ = &started;
  c.release_first_ = &release;
  std::vector<float> g(8, 1.0f);
  GradientReducerOptions o;
  o.bucket_bytes = 4 * sizeof(float);
  GradientReducer r(c, absl::MakeSpan(g), o);
  r.MarkReady(4, 8);  // The last layer: fills bucket [4, 8).
  // Its all-reduce runs on the communication thread before the rest is marked.
  started.WaitForNotification();
  EXPECT_THAT(c.sizes(), ElementsAre(4));
  r.MarkReady(0, 4);
  release.Notify();
  auto sync = r.Finish();
  ASSERT_TRUE(sync.ok());
  EXPECT_THAT(c.sizes(), ElementsAre(4, 4));
  EXPECT_THAT(g, ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
}

TEST(GradientReducer, AggregationSumsLocallyAndReducesEveryKthBatch) {
  FakeCollective c(2);
  std::vector<float> g(4);
  GradientReducerOptions o;
  o.aggregation_frequency = 3;
  GradientReducer r(c, absl::MakeSpan(g), o);
  for (int batch = 0; batch < 3; ++batch) {
    std::fill(g.begin(), g.end(), static_cast<float>(batch + 1));  // backward overwrites
    EXPECT_EQ(r.IsSyncBatch(), batch == 2);
    r.MarkReady(0, 4);
    auto sync = r.Finish();
    ASSERT_TRUE(sync.ok());
    EXPECT_EQ(*sync, batch == 2);
    if (batch < 2) EXPECT_TRUE(c.sizes().empty()) << "no communication before the k-th batch";
  }
  // Mean over 3 batches (1, 2, 3) and 2 identical ranks.
  EXPECT_THAT(g, ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(c.sizes(), ElementsAre(4));
  // The next group starts from zero.
  std::fill(g.begin(), g.end(), 9.0f);
  r.MarkReady(0, 4);
  ASSERT_FALSE(*r.Finish());
}

TEST(GradientReducer, WithoutOverlapFinishReducesOnTheCallersThread) {
  FakeCollective c(2);
  std::vector<float> g(5, 3.0f);
  GradientReducerOptions o;
  o.overlap = false;
  o.bucket_bytes = 2 * sizeof(float);
  GradientReducer r(c, absl::MakeSpan(g), o);
  r.MarkReady(0, 5);
  EXPECT_TRUE(c.sizes().empty());
  ASSERT_TRUE(*r.Finish());
  EXPECT_THAT(c.sizes(), ElementsAre(2, 2, 1));
  EXPECT_THAT(g, ElementsAre(3, 3, 3, 3, 3));
}

TEST(GradientReducer, UnmarkedGradientsAndCollectiveFailuresAreErrors) {
  FakeCollective c(2);
  std::vector<float> g(4, 1.0f);
  GradientReducer r(c, absl::MakeSpan(g), {});
  r.MarkReady(0, 2);
  EXPECT_EQ(r.Finish().status().code(), absl::StatusCode::kFailedPrecondition);

  c.fail_ = absl::AbortedError("peer gone");
  GradientReducer r2(c, absl::MakeSpan(g), {});
  r2.MarkReady(0, 4);
  EXPECT_EQ(r2.Finish().status().code(), absl::StatusCode::kAborted);
}

// A model on a device hands the reducer its own arithmetic: every sum, average and
// buffer goes through it (here host math that counts and can fail), none through the host.
class CountingMath : public GradientMath {
 public:
  absl::StatusOr<absl::Span<float>> NewBuffer(size_t n) override {
    ++buffers;
    return host_->NewBuffer(n);
  }
  absl::Status MoveAdd(absl::Span<float> dst, absl::Span<float> src) override {
    ++move_adds;
    return host_->MoveAdd(dst, src);
  }
  absl::Status Add(absl::Span<float> dst, absl::Span<const float> src) override {
    ++adds;
    if (!fail.ok()) return fail;
    return host_->Add(dst, src);
  }
  absl::Status Scale(absl::Span<float> data, float factor) override {
    ++scales;
    return host_->Scale(data, factor);
  }
  int buffers = 0, move_adds = 0, adds = 0, scales = 0;
  absl::Status fail;

 private:
  std::unique_ptr<GradientMath> host_ = NewHostGradientMath();
};

TEST(GradientReducer, DoesItsArithmeticThroughTheModelsGradientMath) {
  FakeCollective c(2);
  CountingMath math;
  std::vector<float> g(4);
  GradientReducerOptions o;
  o.aggregation_frequency = 2;
  o.bucket_bytes = 2 * sizeof(float);
  o.math = &math;
  GradientReducer r(c, absl::MakeSpan(g), o);
  EXPECT_EQ(math.buffers, 1);
  for (int batch = 0; batch < 2; ++batch) {
    std::fill(g.begin(), g.end(), static_cast<float>(batch + 1));
    r.MarkReady(2, 4);
    r.MarkReady(0, 2);
    ASSERT_TRUE(r.Finish().ok());
  }
  EXPECT_EQ(math.adds, 2);       // the first batch, one call per MarkReady
  EXPECT_EQ(math.move_adds, 2);  // the sync batch
  EXPECT_EQ(math.scales, 2);     // one per bucket
  EXPECT_THAT(g, ElementsAre(1.5, 1.5, 1.5, 1.5));

  math.fail = absl::InternalError("device lost");
  r.MarkReady(0, 4);
  EXPECT_THAT(r.Finish().status().message(), HasSubstr("device lost"));
}

}  // namespace
}  // namespace det::harness
