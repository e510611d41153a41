#include "common/worker/cpp/harness/rendezvous_client.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "proto/worker.grpc.pb.h"

namespace det::harness {
namespace {

// One call waits at most this long; then it is repeated (the master keeps the round).
constexpr absl::Duration kCallWait = absl::Seconds(30);

class MasterRendezvous : public collective::Rendezvous {
 public:
  explicit MasterRendezvous(const TrialContext& c)
      : master_(c.master), stub_(v1::WorkerService::NewStub(rpc::MakeChannel(c.master))) {
    auth_.set_allocation_id(c.allocation_id);
    auth_.set_token(c.allocation_token);
    auth_.set_rank(c.rank);
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& key, const std::string& value,
                                                     absl::Duration timeout) override {
    v1::RendezvousRequest req;
    *req.mutable_auth() = auth_;
    req.set_key(key);
    req.set_address(absl::Base64Escape(value));
    absl::Time deadline = absl::Now() + timeout;
    absl::Duration backoff = absl::Milliseconds(100);
    while (true) {
      absl::Duration wait = std::min(kCallWait, deadline - absl::Now());
      if (wait <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(absl::StrCat("rendezvous '", key, "' at the master ", master_,
                                                        ": not every rank arrived within ",
                                                        absl::FormatDuration(timeout)));
      }
      req.set_wait_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(wait)));
      auto ctx = rpc::Context(wait);
      v1::RendezvousResponse resp;
      absl::Status st = rpc::FromGrpc(stub_->Rendezvous(ctx.get(), req, &resp), master_);
      if (st.ok() && resp.ready()) {
        std::vector<std::string> out;
        for (const auto& a : resp.addresses()) {
          std::string decoded;
          if (!absl::Base64Unescape(a, &decoded)) {
            return absl::DataLossError(absl::StrCat("rendezvous '", key, "': an entry is not base64"));
          }
          out.push_back(std::move(decoded));
        }
        return out;
      }
      if (!st.ok() && !rpc::IsTransient(st)) {
        return absl::Status(st.code(), absl::StrCat("rendezvous '", key, "': ", st.message()));
      }
      if (!st.ok() && st.code() != absl::StatusCode::kDeadlineExceeded) {
        absl::SleepFor(backoff);  // The master is unreachable or restarting.
        backoff = std::min(backoff * 2, absl::Seconds(2));
      }
    }
  }

 private:
  std::string master_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  v1::WorkerAuth auth_;
};

}  // namespace

std::unique_ptr<collective::Rendezvous> NewMasterRendezvous(const TrialContext& context) {
  return std::make_unique<MasterRendezvous>(context);
}

}  // namespace det::harness
