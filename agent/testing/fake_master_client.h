// A MasterClient for tests: queues commands for the agent's long poll, records what the agent
// reports, and fails calls on request. No network.
#ifndef DET_AGENT_TESTING_FAKE_MASTER_CLIENT_H_
#define DET_AGENT_TESTING_FAKE_MASTER_CLIENT_H_

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/master_client/master_client.h"
#include "common/rpc/context_sha256.h"

namespace det::agent {

// Thread-safe.
class FakeMasterClient : public MasterClient {
 public:
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req) override {
    absl::MutexLock l(&mu_);
    registers_.push_back(req);
    if (!register_error_.ok()) return register_error_;
    v1::RegisterResponse resp;
    resp.set_session_id(absl::StrCat("session-", registers_.size()));
    resp.set_heartbeat_interval_ms(100);
    for (const auto& id : kill_on_register_) resp.add_kill_allocations(id);
    resp.set_agent_credential(credential_);
    return resp;
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest& req) override {
    absl::MutexLock l(&mu_);
    heartbeats_.push_back(req);
    if (!heartbeat_error_.ok()) return heartbeat_error_;
    for (const auto& m : req.system_metrics()) metrics_.push_back(m);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::PollCommandsResponse> PollCommands(
      const v1::PollCommandsRequest& req) override {
    absl::MutexLock l(&mu_);
    if (!poll_error_.ok()) return poll_error_;
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_ || !commands_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(req.wait_ms()));
    if (shutdown_) return absl::CancelledError("shut down");
    v1::PollCommandsResponse resp;
    for (auto& c : commands_) *resp.add_commands() = std::move(c);
    commands_.clear();
    return resp;
  }
  absl::Status ReportLaunched(const v1::ReportLaunchedRequest& req) override {
    absl::MutexLock l(&mu_);
    if (!reports_error_.ok()) return Refused();
    launched_.push_back(req);
    return absl::OkStatus();
  }
  absl::Status ReportExit(const v1::ReportExitRequest& req) override {
    absl::MutexLock l(&mu_);
    if (!reports_error_.ok()) return Refused();
    exits_.push_back(req);
    return absl::OkStatus();
  }
  absl::Status ShipLogs(const v1::ShipLogsRequest& req) override {
    absl::MutexLock l(&mu_);
    if (!reports_error_.ok()) return Refused();
    if (!logs_error_.ok()) {
      ++refused_reports_;
      return logs_error_;
    }
    ships_.push_back(req);
    for (const auto& line : req.lines()) lines_.push_back(line);
    dropped_ = std::max(dropped_, req.dropped());
    largest_ship_ = std::max(largest_ship_, req.ByteSizeLong());
    return absl::OkStatus();
  }
  // ReportLaunched, ReportExit and ShipLogs calls refused by FailReports.
  int refused_reports() {
    absl::MutexLock l(&mu_);
    return refused_reports_;
  }
  // The largest ShipLogsRequest so far, in bytes.
  size_t largest_ship() {
    absl::MutexLock l(&mu_);
    return largest_ship_;
  }
  absl::StatusOr<v1::GetModelContextResponse> GetModelContext(
      const v1::GetModelContextRequest& req) override {
    absl::MutexLock l(&mu_);
    ++context_fetches_;
    if (!context_error_.ok()) return context_error_;
    auto it = contexts_.find(req.allocation_id());
    if (it == contexts_.end()) return absl::NotFoundError("no such allocation");
    v1::GetModelContextResponse resp;
    resp.set_model_context(it->second.SerializeAsString());
    resp.set_sha256(rpc::ContextSha256(resp.model_context()));
    return resp;
  }
  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
  }

  // The context GetModelContext answers for `allocation_id`.
  void ServeContext(const std::string& allocation_id, v1::ModelContext context) {
    absl::MutexLock l(&mu_);
    contexts_[allocation_id] = std::move(context);
  }
  void FailContexts(absl::Status st) {
    absl::MutexLock l(&mu_);
    context_error_ = std::move(st);
  }
  int context_fetches() {
    absl::MutexLock l(&mu_);
    return context_fetches_;
  }

  void Send(v1::AgentCommand cmd) {
    absl::MutexLock l(&mu_);
    commands_.push_back(std::move(cmd));
  }
  // The agent credential every RegisterResponse carries ("": none).
  void IssueCredential(const std::string& credential) {
    absl::MutexLock l(&mu_);
    credential_ = credential;
  }
  void FailRegister(absl::Status st) {
    absl::MutexLock l(&mu_);
    register_error_ = std::move(st);
  }
  void FailReports(absl::Status st) {
    absl::MutexLock l(&mu_);
    reports_error_ = std::move(st);
  }
  // PollCommands fails with `st` (OK: answers again).
  void FailPolls(absl::Status st) {
    absl::MutexLock l(&mu_);
    poll_error_ = std::move(st);
  }
  // ShipLogs calls only.
  void FailLogs(absl::Status st) {
    absl::MutexLock l(&mu_);
    logs_error_ = std::move(st);
  }
  // The ShipLogs calls accepted, in order.
  std::vector<v1::ShipLogsRequest> ships() {
    absl::MutexLock l(&mu_);
    return ships_;
  }
  std::vector<v1::HeartbeatRequest> heartbeats() {
    absl::MutexLock l(&mu_);
    return heartbeats_;
  }
  void FailHeartbeats(absl::Status st) {
    absl::MutexLock l(&mu_);
    heartbeat_error_ = std::move(st);
  }
  void KillOnRegister(const std::string& id) {
    absl::MutexLock l(&mu_);
    kill_on_register_.push_back(id);
  }

  std::vector<v1::ReportExitRequest> exits() {
    absl::MutexLock l(&mu_);
    return exits_;
  }
  std::vector<v1::ReportLaunchedRequest> launched() {
    absl::MutexLock l(&mu_);
    return launched_;
  }
  std::vector<v1::RegisterRequest> registers() {
    absl::MutexLock l(&mu_);
    return registers_;
  }
  int64_t dropped() {
    absl::MutexLock l(&mu_);
    return dropped_;
  }
  std::vector<v1::SystemMetrics> metrics() {
    absl::MutexLock l(&mu_);
    return metrics_;
  }
  // Messages of `rank`'s lines on `stream`.
  std::vector<std::string> Lines(int rank, const std::string& stream) {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const auto& line : lines_) {
      if (line.rank() == rank && line.stream() == stream) out.push_back(line.message());
    }
    return out;
  }
  std::string AllLines() {
    absl::MutexLock l(&mu_);
    std::string out;
    for (const auto& line : lines_) {
      absl::StrAppend(&out, line.rank(), " ", line.stream(), ": ", line.message(), "\n");
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status register_error_ ABSL_GUARDED_BY(mu_);
  absl::Status reports_error_ ABSL_GUARDED_BY(mu_);
  absl::Status logs_error_ ABSL_GUARDED_BY(mu_);
  absl::Status poll_error_ ABSL_GUARDED_BY(mu_);
  absl::Status heartbeat_error_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ShipLogsRequest> ships_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::ModelContext> contexts_ ABSL_GUARDED_BY(mu_);
  absl::Status context_error_ ABSL_GUARDED_BY(mu_);
  int context_fetches_ ABSL_GUARDED_BY(mu_) = 0;
  size_t largest_ship_ ABSL_GUARDED_BY(mu_) = 0;
  int refused_reports_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Status Refused() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++refused_reports_;
    return reports_error_;
  }
  std::vector<std::string> kill_on_register_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AgentCommand> commands_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::RegisterRequest> registers_ ABSL_GUARDED_BY(mu_);
  std::string credential_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportLaunchedRequest> launched_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportExitRequest> exits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::LogLine> lines_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SystemMetrics> metrics_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace det::agent

#endif  // DET_AGENT_TESTING_FAKE_MASTER_CLIENT_H_
