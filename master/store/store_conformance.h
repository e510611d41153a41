// The Store contract as one suite (store_conformance.cc), run against every backend: each
// backend's test instantiates StoreConformanceTest with a Backend that opens a fresh, empty
// store per test. A behaviour the master relies on belongs here, so that tests on the
// in-memory store mean what they would mean on SQLite or PostgreSQL.
#ifndef DET_MASTER_STORE_STORE_CONFORMANCE_H_
#define DET_MASTER_STORE_STORE_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/store/store.h"

namespace det::master {

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Store>()> open;
};

inline void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

class StoreConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    store_ = GetParam().open();
    ASSERT_NE(store_, nullptr);
  }

  int64_t AddExperiment(int trials = 0, std::vector<v1::Trial>* inserted = nullptr) {
    v1::Experiment e;
    e.set_name("exp");
    e.set_state(v1::STATE_ACTIVE);
    std::vector<v1::Trial> ts(trials);
    auto id = store_->InsertExperiment(e, "ctx", &ts);
    EXPECT_TRUE(id.ok()) << id.status();
    if (inserted) *inserted = ts;
    return id.value_or(0);
  }

  int64_t AddTrial(int64_t experiment_id) {
    v1::Trial t;
    t.set_experiment_id(experiment_id);
    t.set_state(v1::STATE_QUEUED);
    auto id = store_->InsertTrial(t);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  // Stores `c` as its trial's report would: with the trial (which must be stored), its
  // latest_checkpoint now `c`, in the same write.
  absl::Status AddCheckpoint(const v1::Checkpoint& c) {
    v1::Trial t;
    t.set_id(c.trial_id());
    t.set_state(v1::STATE_ACTIVE);
    t.set_latest_checkpoint(c.storage_path());
    return store_->AddCheckpoint(c, t);
  }

  std::unique_ptr<Store> store_;
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_STORE_CONFORMANCE_H_
