#include "common/worker/cpp/harness/reporter_client.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "proto/worker.grpc.pb.h"

namespace det::harness {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(30);

class GrpcReporter : public Reporter {
 public:
  GrpcReporter(const TrialContext& c, absl::Duration give_up_after)
      : context_(c),
        give_up_after_(give_up_after),
        stub_(v1::WorkerService::NewStub(rpc::MakeChannel(c.master))) {
    auth_.set_allocation_id(c.allocation_id);
    auth_.set_token(c.allocation_token);
    auth_.set_rank(c.rank);
  }

  absl::Status ReportMetrics(const std::string& group, int64_t total_batches,
                             const std::map<std::string, double>& values) override {
    return ReportMetricsBatch({MakeMetrics(group, total_batches, values)});
  }

  absl::Status ReportMetricsBatch(const std::vector<v1::Metrics>& metrics) override {
    if (metrics.empty()) return absl::OkStatus();
    v1::ReportMetricsRequest req;
    *req.mutable_auth() = auth_;
    req.set_trial_id(context_.spec.trial_id());
    for (const auto& m : metrics) {
      v1::Metrics* row = req.add_metrics();
      *row = m;
      row->set_trial_id(context_.spec.trial_id());
    }
    return Retry("ReportMetrics", [&](grpc::ClientContext* ctx) {
      v1::ReportMetricsResponse resp;
      return stub_->ReportMetrics(ctx, req, &resp);
    });
  }

  absl::Status ReportCheckpoint(const v1::Checkpoint& checkpoint) override {
    v1::ReportCheckpointRequest req;
    *req.mutable_auth() = auth_;
    *req.mutable_checkpoint() = checkpoint;
    return Retry("ReportCheckpoint", [&](grpc::ClientContext* ctx) {
      v1::ReportCheckpointResponse resp;
      return stub_->ReportCheckpoint(ctx, req, &resp);
    });
  }

 private:
  // `call` until it succeeds, fails for good or give_up_after_ passes; a failure names
  // `name` (e.g. "ReportMetrics to the master failed: RESOURCE_EXHAUSTED: ... (disk
  // full)"), so that the step that could not report says what was refused.
  template <typename Call>
  absl::Status Retry(const char* name, Call call) {
    absl::Status st = RetryTransient(call);
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat(name, " to the master failed: ",
                                                absl::StatusCodeToString(st.code()), ": ",
                                                st.message()));
  }

  template <typename Call>
  absl::Status RetryTransient(Call call) {
    absl::Time give_up = absl::Now() + give_up_after_;
    absl::Duration backoff = absl::Milliseconds(200);
    bool warned = false;
    while (true) {
      auto ctx = rpc::Context(kCallTimeout);
      absl::Status st = rpc::FromGrpc(call(ctx.get()), context_.master);
      if (st.ok() || !rpc::IsTransient(st) || absl::Now() + backoff > give_up) return st;
      if (!warned) {
        std::cerr << "det: " << st.message() << "; retrying" << std::endl;
        warned = true;
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(5));
    }
  }

  TrialContext context_;
  absl::Duration give_up_after_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  v1::WorkerAuth auth_;
};

}  // namespace

v1::Metrics MakeMetrics(const std::string& group, int64_t total_batches,
                        const std::map<std::string, double>& values) {
  v1::Metrics m;
  m.set_group(group);
  m.set_total_batches(total_batches);
  m.set_report_time_ms(absl::ToUnixMillis(absl::Now()));
  for (const auto& [k, v] : values) (*m.mutable_values())[k] = v;
  return m;
}

std::unique_ptr<Reporter> NewGrpcReporter(const TrialContext& context, absl::Duration give_up_after) {
  return std::make_unique<GrpcReporter>(context, give_up_after);
}

}  // namespace det::harness
