#include "common/logging/log_ring.h"

#include <chrono>

namespace det {

LogRing::Page LogRing::Read(int tail, int64_t after_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Page page;
  page.capacity = capacity_;
  page.dropped = next_id_ - 1 - static_cast<int64_t>(lines_.size());
  size_t first = 0;
  while (first < lines_.size() && lines_[first].id <= after_id) ++first;
  if (tail > 0 && lines_.size() - first > static_cast<size_t>(tail)) {
    first = lines_.size() - static_cast<size_t>(tail);
  }
  page.lines.assign(lines_.begin() + static_cast<std::ptrdiff_t>(first), lines_.end());
  return page;
}

void LogRing::sink_it_(const spdlog::details::log_msg& msg) {
  RingLine line;
  line.id = next_id_++;
  line.time_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
  auto level = spdlog::level::to_string_view(msg.level);
  line.level.assign(level.data(), level.size());
  line.component.assign(msg.logger_name.data(), msg.logger_name.size());
  line.message.assign(msg.payload.data(), msg.payload.size());
  lines_.push_back(std::move(line));
  while (lines_.size() > capacity_) lines_.pop_front();
}

const std::shared_ptr<LogRing>& ProcessLogRing() {
  // Shared with every logger; never destroyed (loggers may log during static teardown).
  static auto* ring = new std::shared_ptr<LogRing>(std::make_shared<LogRing>());
  return *ring;
}

}  // namespace det
