#include "agent/sysmetrics/metrics_buffer.h"

#include <utility>

#include "common/logging/logging.h"

namespace det::agent {

void MetricsBuffer::Add(v1::SystemMetrics sample) {
  absl::MutexLock l(&mu_);
  samples_.push_back(std::move(sample));
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<v1::SystemMetrics> MetricsBuffer::Pending() {
  absl::MutexLock l(&mu_);
  return std::vector<v1::SystemMetrics>(samples_.begin(), samples_.end());
}

void MetricsBuffer::SentUntil(int64_t time_ms) {
  absl::MutexLock l(&mu_);
  while (!samples_.empty() && samples_.front().time_ms() <= time_ms) samples_.pop_front();
}

void MetricsCollector::Prime() { sampler_.Sample(clock_.Now()).IgnoreError(); }

void MetricsCollector::SampleOnce() {
  absl::StatusOr<v1::SystemMetrics> m = sampler_.Sample(clock_.Now());
  if (!m.ok()) {
    if (!warned_) Logger("agent")->warn("cannot sample system metrics: {}", m.status().ToString());
    warned_ = true;
    return;
  }
  m->set_agent_id(agent_id_);
  buffer_.Add(*std::move(m));
}

}  // namespace det::agent
