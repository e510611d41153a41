#include "common/worker/cpp/harness/preempt.h"

#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "common/worker/cpp/harness/distributed.h"
#include "proto/worker.grpc.pb.h"

namespace det::harness {
namespace {

// How long one ShouldPreempt long poll waits (Python's PreemptContext._POLL_MS).
constexpr absl::Duration kPollWait = absl::Seconds(30);
// Added to the wait for the call's deadline.
constexpr absl::Duration kCallSlack = absl::Seconds(30);

class GrpcPreemptSource : public PreemptSource {
 public:
  GrpcPreemptSource(const TrialContext& c, absl::Duration give_up_after)
      : master_(c.master),
        give_up_after_(give_up_after),
        stub_(v1::WorkerService::NewStub(rpc::MakeChannel(c.master))) {
    auth_.set_allocation_id(c.allocation_id);
    auth_.set_token(c.allocation_token);
    auth_.set_rank(c.rank);
  }

  absl::StatusOr<PreemptAnswer> Ask(absl::Duration wait) override {
    v1::ShouldPreemptRequest req;
    *req.mutable_auth() = auth_;
    req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(wait)));
    const absl::Time give_up = absl::Now() + give_up_after_;
    absl::Duration backoff = absl::Milliseconds(200);
    bool warned = false;
    while (true) {
      std::shared_ptr<grpc::ClientContext> ctx = rpc::Context(wait + kCallSlack);
      {
        absl::MutexLock lock(&mu_);
        if (cancelled_) return absl::CancelledError("ShouldPreempt: cancelled");
        call_ = ctx;
      }
      v1::ShouldPreemptResponse resp;
      absl::Status st = rpc::FromGrpc(stub_->ShouldPreempt(ctx.get(), req, &resp), master_);
      {
        absl::MutexLock lock(&mu_);
        call_.reset();
        if (cancelled_) return absl::CancelledError("ShouldPreempt: cancelled");
      }
      if (st.ok()) return PreemptAnswer{resp.preempt(), resp.reason()};
      if (!rpc::IsTransient(st) || absl::Now() + backoff > give_up) {
        return absl::Status(st.code(), absl::StrCat("ShouldPreempt to the master failed: ",
                                                    absl::StatusCodeToString(st.code()), ": ",
                                                    st.message()));
      }
      if (!warned) {
        std::cerr << "det: ShouldPreempt: " << st.message() << "; retrying" << std::endl;
        warned = true;
      }
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&cancelled_), backoff);
      backoff = std::min(backoff * 2, absl::Seconds(5));
    }
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (call_) call_->TryCancel();
  }

 private:
  const std::string master_;
  const absl::Duration give_up_after_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  v1::WorkerAuth auth_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> call_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<PreemptSource> NewGrpcPreemptSource(const TrialContext& context,
                                                    absl::Duration give_up_after) {
  return std::make_unique<GrpcPreemptSource>(context, give_up_after);
}

PreemptContext::PreemptContext(std::unique_ptr<PreemptSource> source,
                               collective::Collective* collective)
    : source_(std::move(source)), collective_(collective) {
  InstallStopHandler();
}

PreemptContext::~PreemptContext() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  if (source_) source_->Cancel();
  if (poller_.joinable()) poller_.join();
}

void PreemptContext::Poll() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || master_said_) return;
    }
    absl::StatusOr<PreemptAnswer> answer = source_->Ask(kPollWait);
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (!answer.ok()) {
      if (absl::IsUnimplemented(answer.status())) {
        // An older master: only signals say stop.
        std::cerr << "det: " << answer.status().message()
                  << "; ShouldPreempt answers from SIGTERM alone" << std::endl;
        return;
      }
      error_ = answer.status();
      return;
    }
    if (answer->preempt) {
      master_said_ = true;
      reason_ = answer->reason.empty() ? "asked by the master" : answer->reason;
      return;
    }
  }
}

absl::StatusOr<bool> PreemptContext::ShouldPreempt() {
  if (source_ && !poller_.joinable()) poller_ = std::thread(&PreemptContext::Poll, this);
  const bool signalled = StopRequested();
  bool master_said;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    master_said = master_said_;
    error = error_;
  }
  // {the master said stop (to the chief), a rank got the signal, the allocation has ended,
  // the chief could not ask}: one all-reduce, so every rank learns the same.
  std::vector<int64_t> flags = {master_said ? 1 : 0, signalled ? 1 : 0, absl::IsFailedPrecondition(error) ? 1 : 0,
                                !error.ok() && !absl::IsFailedPrecondition(error) ? 1 : 0};
  if (collective_ != nullptr && collective_->size() > 1) {
    if (absl::Status st = collective_->AllReduceSum(absl::MakeSpan(flags)); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("agreeing on whether to stop: ", st.message()));
    }
  }
  std::string why;
  if (flags[0] > 0) {
    why = master_said ? "" : "asked by the master (through the chief)";
  } else if (flags[1] > 0) {
    why = signalled ? "SIGTERM received" : "another rank received SIGTERM";
  }
  if (flags[0] > 0 || flags[1] > 0) {
    absl::MutexLock lock(&mu_);
    if (reason_.empty()) reason_ = why;
    return true;
  }
  if (!error.ok()) return error;
  if (flags[2] > 0) {
    return absl::FailedPreconditionError("the chief's ShouldPreempt: the allocation has ended");
  }
  if (flags[3] > 0) {
    return absl::UnavailableError("the chief could not ask the master whether to stop");
  }
  return false;
}

std::string PreemptContext::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

}  // namespace det::harness
