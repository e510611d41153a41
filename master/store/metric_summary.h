// How a metric row folds into its trial's summaries (min, max, last, count per metric of
// the training, validation and timings groups) and total_batches. The master applies it as
// rows arrive; the store applies it when it recomputes summaries after superseding rows.
#ifndef DET_MASTER_STORE_METRIC_SUMMARY_H_
#define DET_MASTER_STORE_METRIC_SUMMARY_H_

#include <algorithm>
#include <cmath>
#include <limits>

#include "proto/types.pb.h"

namespace det::master {

inline void ApplyToSummaries(const v1::Metrics& m, v1::Trial* trial) {
  google::protobuf::Map<std::string, v1::MetricSummary>* summary =
      m.group() == "training"     ? trial->mutable_training_summary()
      : m.group() == "validation" ? trial->mutable_validation_summary()
      : m.group() == "timings"    ? trial->mutable_timings_summary()
                                  : nullptr;
  trial->set_total_batches(std::max(trial->total_batches(), m.total_batches()));
  if (!summary) return;
  for (const auto& [name, value] : m.values()) {
    v1::MetricSummary& s = (*summary)[name];
    // min and max are of the finite values (NaN until there is one); last and count take
    // every value, NaN and infinities included.
    if (s.count() == 0) {
      s.set_min(std::numeric_limits<double>::quiet_NaN());
      s.set_max(std::numeric_limits<double>::quiet_NaN());
    }
    if (std::isfinite(value)) {
      if (std::isnan(s.min()) || value < s.min()) s.set_min(value);
      if (std::isnan(s.max()) || value > s.max()) s.set_max(value);
    }
    s.set_last(value);
    s.set_count(s.count() + 1);
  }
}

}  // namespace det::master

#endif  // DET_MASTER_STORE_METRIC_SUMMARY_H_
