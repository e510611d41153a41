// The master's side of the worker channel for the C++ harness's tests: a real gRPC
// WorkerService on loopback (port 0) that records what workers send and answers as a test
// tells it (the C++ twin of common/worker/python/tests/fake_master.py; the contract table,
// common/worker/contract/cases.json, holds both to the same expectations).
#ifndef DET_COMMON_WORKER_CPP_HARNESS_TESTING_FAKE_MASTER_H_
#define DET_COMMON_WORKER_CPP_HARNESS_TESTING_FAKE_MASTER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"

namespace det::harness::testing {

// What the fake answers with instead of OK.
struct FakeError {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message;
  // How many calls fail before the next ones succeed (-1: every call).
  int times = -1;
};

// Thread-safe.
class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  explicit FakeWorkerService(int world_size) : world_size_(world_size) {}

  grpc::Status ReportMetrics(grpc::ServerContext*, const v1::ReportMetricsRequest* req,
                             v1::ReportMetricsResponse*) override;
  grpc::Status ReportCheckpoint(grpc::ServerContext*, const v1::ReportCheckpointRequest* req,
                                v1::ReportCheckpointResponse*) override;
  grpc::Status Rendezvous(grpc::ServerContext*, const v1::RendezvousRequest* req,
                          v1::RendezvousResponse* resp) override;
  // Waits up to the request's wait_ms for SetPreempt or SetPreemptError.
  grpc::Status ShouldPreempt(grpc::ServerContext*, const v1::ShouldPreemptRequest* req,
                             v1::ShouldPreemptResponse* resp) override;

  void SetPreempt(bool preempt, const std::string& reason);
  void SetPreemptError(FakeError error);
  void SetMetricsError(FakeError error);
  void SetCheckpointError(FakeError error);
  // Answers every waiting and later ShouldPreempt with "no" at once (shutting down).
  void Release();

  std::vector<v1::ReportMetricsRequest> metrics() const;
  // Every Metrics row of every ReportMetrics, in order (of `group` only when not empty).
  std::vector<v1::Metrics> rows(const std::string& group = "") const;
  std::vector<v1::ReportCheckpointRequest> checkpoints() const;
  std::vector<v1::ShouldPreemptRequest> preempt_requests() const;
  // How many ReportMetrics calls were refused (by SetMetricsError).
  int refused_metrics() const;

 private:
  // Consumes one failure of `e`; the status to answer with.
  static grpc::Status Fail(FakeError& e);

  const int world_size_;
  mutable absl::Mutex mu_;
  std::vector<v1::ReportMetricsRequest> metrics_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportCheckpointRequest> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ShouldPreemptRequest> preempt_requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int, std::string>> rounds_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::ShouldPreemptResponse> preempt_ ABSL_GUARDED_BY(mu_);
  FakeError preempt_error_ ABSL_GUARDED_BY(mu_);
  FakeError metrics_error_ ABSL_GUARDED_BY(mu_);
  FakeError checkpoint_error_ ABSL_GUARDED_BY(mu_);
  int refused_metrics_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// A started FakeWorkerService on 127.0.0.1:0.
class FakeMaster {
 public:
  explicit FakeMaster(int world_size = 1);
  // Releases waiting calls, then stops the server.
  ~FakeMaster();
  std::string address() const { return address_; }
  FakeWorkerService& service() { return service_; }

 private:
  FakeWorkerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace det::harness::testing

#endif  // DET_COMMON_WORKER_CPP_HARNESS_TESTING_FAKE_MASTER_H_
