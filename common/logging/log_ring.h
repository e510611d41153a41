// LogRing: the latest log lines of this process, kept in memory (det master logs). A spdlog
// sink that every logger made by Logger() (logging.h) writes to besides stderr; it keeps
// the last `capacity` lines and counts those it let go.
//
// Thread-safe: spdlog calls the sink from any logging thread; Read may be called from any
// thread.
#ifndef DET_COMMON_LOGGING_LOG_RING_H_
#define DET_COMMON_LOGGING_LOG_RING_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "spdlog/sinks/base_sink.h"

namespace det {

struct RingLine {
  // 1, 2, ... in the order lines were logged.
  int64_t id = 0;
  int64_t time_ms = 0;
  // spdlog's level name: "info", "warning", "error", ...
  std::string level;
  std::string component;
  std::string message;
};

class LogRing : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Default: the last 10,000 lines.
  explicit LogRing(size_t capacity = 10000) : capacity_(capacity == 0 ? 1 : capacity) {}

  struct Page {
    std::vector<RingLine> lines;
    // Lines logged but no longer kept.
    int64_t dropped = 0;
    size_t capacity = 0;
  };
  // The kept lines with id > after_id, the last `tail` of them when tail > 0, oldest first.
  Page Read(int tail, int64_t after_id);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  const size_t capacity_;
  // Guarded by base_sink's mutex_ (sink_it_ runs under it; Read takes it).
  std::deque<RingLine> lines_;
  int64_t next_id_ = 1;
};

// The ring every logger of this process writes to (created on first use; never freed).
const std::shared_ptr<LogRing>& ProcessLogRing();

}  // namespace det

#endif  // DET_COMMON_LOGGING_LOG_RING_H_
