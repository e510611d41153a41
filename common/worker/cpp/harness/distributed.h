// Data-parallel plumbing for training code: the trial's collective, and metrics reduced
// over the ranks.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_DISTRIBUTED_H_
#define DET_COMMON_WORKER_CPP_HARNESS_DISTRIBUTED_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/worker/cpp/collective/collective.h"
#include "common/worker/cpp/collective/rendezvous.h"
#include "common/worker/cpp/harness/context.h"

namespace det::harness {

// The rendezvous key prefix of this run of the trial: "<allocation id>/<backend>". The
// allocation id changes with every run (it ends in the run id), so every restart is a
// fresh membership generation.
std::string MembershipKey(const TrialContext& context, const std::string& backend);

struct CollectiveOptions {
  // Longest wait of one operation for the other ranks.
  absl::Duration timeout = absl::Minutes(5);
  // Longest wait for every rank at the rendezvous (they load their data first).
  absl::Duration rendezvous_timeout = absl::Minutes(10);
};

// The collective for a host-memory model: a LocalCollective for a world of one (no
// rendezvous), else a GlooCollective over TCP bootstrapped through `rendezvous`,
// listening on context.collective_iface or collective_host when set, else on 127.0.0.1
// when every rank runs on one agent (CROSS_SIZE 1), else on the local address this
// machine uses to reach the master. Models on CUDA devices create a
// collective::NcclCollective with MembershipKey(context, "nccl") instead.
absl::StatusOr<std::unique_ptr<collective::Collective>> ConnectCollective(
    const TrialContext& context, collective::Rendezvous& rendezvous,
    const CollectiveOptions& options = {});

// The collective for a model on CUDA device `device`: an NcclCollective bootstrapped
// through `rendezvous` under MembershipKey(context, "nccl"), for a world of one as well
// (the GPU path is the same at every size). FailedPrecondition without a usable device.
absl::StatusOr<std::unique_ptr<collective::Collective>> ConnectCudaCollective(
    const TrialContext& context, collective::Rendezvous& rendezvous, int device,
    const CollectiveOptions& options = {});

// Sums `values` (name -> value) over every rank, in one all-reduce; with `average`
// divides by the world size. Every rank must pass the same names. Returns the result.
absl::StatusOr<std::map<std::string, double>> ReduceMetrics(collective::Collective& collective,
                                                            const std::map<std::string, double>& values,
                                                            bool average);

// Every rank's `mine`, indexed by rank, on every rank (two int64 all-reduces: each rank
// fills only its own slot with its bytes, so the sums are exact copies).
absl::StatusOr<std::vector<std::string>> AllGatherBytes(collective::Collective& collective,
                                                        const std::string& mine);

// Stop requests. The agent sends SIGTERM to a trial's workers when the master preempts,
// pauses or kills the trial, and SIGKILL after a grace period. With the handler
// installed, SIGTERM and SIGINT only record the request, so that training can agree on a
// batch to stop at, checkpoint there and exit (with 0) within the grace.
void InstallStopHandler();
// Whether this process received SIGTERM or SIGINT since InstallStopHandler().
bool StopRequested();
// Whether any rank received a stop request: one int64 all-reduce, so every rank must call
// it at the same points of training, and all get the same answer.
absl::StatusOr<bool> AnyRankStopRequested(collective::Collective& collective);

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_DISTRIBUTED_H_
