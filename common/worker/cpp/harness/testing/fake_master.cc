#include "common/worker/cpp/harness/testing/fake_master.h"

#include "absl/strings/str_cat.h"

namespace det::harness::testing {

grpc::Status FakeWorkerService::Fail(FakeError& e) {
  if (e.code == grpc::StatusCode::OK || e.times == 0) return grpc::Status::OK;
  if (e.times > 0) --e.times;
  return grpc::Status(e.code, e.message);
}

grpc::Status FakeWorkerService::ReportMetrics(grpc::ServerContext*, const v1::ReportMetricsRequest* req,
                                              v1::ReportMetricsResponse*) {
  absl::MutexLock lock(&mu_);
  if (grpc::Status st = Fail(metrics_error_); !st.ok()) {
    ++refused_metrics_;
    return st;
  }
  metrics_.push_back(*req);
  return grpc::Status::OK;
}

grpc::Status FakeWorkerService::ReportCheckpoint(grpc::ServerContext*, const v1::ReportCheckpointRequest* req,
                                                 v1::ReportCheckpointResponse*) {
  absl::MutexLock lock(&mu_);
  if (grpc::Status st = Fail(checkpoint_error_); !st.ok()) return st;
  checkpoints_.push_back(*req);
  return grpc::Status::OK;
}

grpc::Status FakeWorkerService::Rendezvous(grpc::ServerContext*, const v1::RendezvousRequest* req,
                                           v1::RendezvousResponse* resp) {
  absl::MutexLock lock(&mu_);
  std::map<int, std::string>& round = rounds_[req->key()];
  round[req->auth().rank()] = req->address();
  auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return released_ || static_cast<int>(round.size()) >= world_size_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&complete), absl::Milliseconds(req->wait_ms()));
  if (static_cast<int>(round.size()) < world_size_) return grpc::Status::OK;  // not ready
  resp->set_ready(true);
  for (int r = 0; r < world_size_; ++r) resp->add_addresses(round[r]);
  return grpc::Status::OK;
}

grpc::Status FakeWorkerService::ShouldPreempt(grpc::ServerContext*, const v1::ShouldPreemptRequest* req,
                                              v1::ShouldPreemptResponse* resp) {
  absl::MutexLock lock(&mu_);
  preempt_requests_.push_back(*req);
  auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return released_ || preempt_.has_value() || preempt_error_.code != grpc::StatusCode::OK;
  };
  mu_.AwaitWithTimeout(absl::Condition(&answered), absl::Milliseconds(req->wait_ms()));
  if (grpc::Status st = Fail(preempt_error_); !st.ok()) return st;
  if (preempt_.has_value()) *resp = *preempt_;
  return grpc::Status::OK;
}

void FakeWorkerService::SetPreempt(bool preempt, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  preempt_.emplace();
  preempt_->set_preempt(preempt);
  preempt_->set_reason(reason);
}

void FakeWorkerService::SetPreemptError(FakeError error) {
  absl::MutexLock lock(&mu_);
  preempt_error_ = std::move(error);
}

void FakeWorkerService::SetMetricsError(FakeError error) {
  absl::MutexLock lock(&mu_);
  metrics_error_ = std::move(error);
}

void FakeWorkerService::SetCheckpointError(FakeError error) {
  absl::MutexLock lock(&mu_);
  checkpoint_error_ = std::move(error);
}

void FakeWorkerService::Release() {
  absl::MutexLock lock(&mu_);
  released_ = true;
}

std::vector<v1::ReportMetricsRequest> FakeWorkerService::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_;
}

std::vector<v1::Metrics> FakeWorkerService::rows(const std::string& group) const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Metrics> out;
  for (const auto& r : metrics_) {
    for (const auto& m : r.metrics()) {
      if (group.empty() || m.group() == group) out.push_back(m);
    }
  }
  return out;
}

std::vector<v1::ReportCheckpointRequest> FakeWorkerService::checkpoints() const {
  absl::MutexLock lock(&mu_);
  return checkpoints_;
}

std::vector<v1::ShouldPreemptRequest> FakeWorkerService::preempt_requests() const {
  absl::MutexLock lock(&mu_);
  return preempt_requests_;
}

int FakeWorkerService::refused_metrics() const {
  absl::MutexLock lock(&mu_);
  return refused_metrics_;
}

FakeMaster::FakeMaster(int world_size) : service_(world_size) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeMaster::~FakeMaster() {
  service_.Release();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

}  // namespace det::harness::testing
