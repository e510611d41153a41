#include "master/http/prometheus.h"

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

void Metric(std::string* out, const char* name, const char* type, const char* help,
            int64_t value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

}  // namespace

std::string PrometheusText(const v1::GetMasterStatsResponse& s, int64_t http_requests) {
  std::string out;
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    Metric(&out, name, "gauge", help, v);
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    Metric(&out, name, "counter", help, v);
  };
  gauge("det_agents", "Agents known to the master.", s.agents());
  gauge("det_agents_connected", "Agents connected now.", s.agents_connected());
  gauge("det_agents_enabled", "Agents enabled (taking new work).", s.agents_enabled());
  gauge("det_slots", "Slots of connected agents.", s.slots());
  gauge("det_slots_used", "Slots held by allocations.", s.slots_used());
  gauge("det_slots_free", "Slots of enabled, connected agents not in use.", s.slots_free());
  gauge("det_experiments_active", "Experiments not yet ended.", s.experiments_active());
  gauge("det_trials_queued", "Trials waiting for slots.", s.trials_queued());
  gauge("det_trials_running", "Trials holding an allocation.", s.trials_running());
  gauge("det_jobs_queued", "Jobs with at least one trial waiting for slots.", s.jobs_queued());
  gauge("det_master_uptime_seconds", "Seconds since the master started.", s.uptime_ms() / 1000);
  counter("det_experiments_created_total", "Experiments created.", s.experiments_created_total());
  counter("det_allocations_started_total", "Allocations (trial runs) started.",
          s.allocations_started_total());
  counter("det_metric_rows_stored_total", "Metric rows stored.", s.metric_rows_stored_total());
  counter("det_log_lines_stored_total", "Trial log lines stored.", s.log_lines_stored_total());
  counter("det_checkpoints_stored_total", "Checkpoints recorded.", s.checkpoints_stored_total());
  counter("det_api_calls_authenticated_total", "User API calls with a valid session token.",
          s.api_calls_authenticated_total());
  counter("det_api_calls_rejected_total", "User API calls refused for lack of a valid token.",
          s.api_calls_rejected_total());
  counter("det_http_requests_total", "HTTP requests answered.", http_requests);
  return out;
}

}  // namespace det::master
