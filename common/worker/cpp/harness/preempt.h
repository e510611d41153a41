// Cooperative stop, as det's Python package does it (det/core/_preempt.py,
// PreemptMode.WorkersAskChief): whether the trial's workers should checkpoint and exit at
// the next step boundary. The chief asks the master (WorkerService.ShouldPreempt, long-polled
// by a background thread from the first ShouldPreempt() on: the master gives a run that asks
// its stop grace period to checkpoint before any signal); SIGTERM or SIGINT to any rank
// counts too. Every rank calls ShouldPreempt() at the same points and gets the same answer.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_PREEMPT_H_
#define DET_COMMON_WORKER_CPP_HARNESS_PREEMPT_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/worker/cpp/collective/collective.h"
#include "common/worker/cpp/harness/context.h"

namespace det::harness {

// The master's answer to one ShouldPreempt call.
struct PreemptAnswer {
  bool preempt = false;
  std::string reason;
};

// One rank's line to the master's ShouldPreempt. Thread-safe: Cancel() may be called from
// another thread while Ask() waits.
class PreemptSource {
 public:
  virtual ~PreemptSource() = default;
  // Waits up to `wait` for the answer to become "stop". Transient failures (the master
  // restarting) are retried until the source gives up. FailedPrecondition once the
  // allocation has ended; Unimplemented from a master without the call; Cancelled after
  // Cancel().
  virtual absl::StatusOr<PreemptAnswer> Ask(absl::Duration wait) = 0;
  // Ends a waiting Ask() now, and every later one.
  virtual void Cancel() = 0;
};

// ShouldPreempt over gRPC to context.master, authenticated by the allocation's token;
// transient failures are retried with backoff until `give_up_after` has passed.
std::unique_ptr<PreemptSource> NewGrpcPreemptSource(const TrialContext& context,
                                                    absl::Duration give_up_after = absl::Minutes(10));

// Thread-compatible: ShouldPreempt() is called from the thread that trains.
class PreemptContext {
 public:
  // `source`: the chief's line to the master (null on the other ranks, or to answer from
  // signals alone). `collective`: the ranks' host-memory collective, or null for a world
  // of one. Installs the SIGTERM/SIGINT handler (InstallStopHandler).
  PreemptContext(std::unique_ptr<PreemptSource> source, collective::Collective* collective);
  // Stops the poller (cancelling its call).
  ~PreemptContext();
  PreemptContext(const PreemptContext&) = delete;
  PreemptContext& operator=(const PreemptContext&) = delete;

  // True once the workers should save what they need and exit: the master said so to the
  // chief, or some rank got SIGTERM. One all-reduce when there is a collective, so every
  // rank must call it at the same points. FailedPrecondition (on every rank) when the
  // master says the allocation has ended, or another error when the chief could not ask
  // it; without ShouldPreempt on the master (Unimplemented) the answer comes from signals.
  absl::StatusOr<bool> ShouldPreempt();
  // Why ShouldPreempt() said true, as this rank knows it: the master's reason (on the
  // chief), "asked by the master (through the chief)", "SIGTERM received" or "another rank
  // received SIGTERM"; "" before.
  std::string reason() const;

 private:
  void Poll();

  std::unique_ptr<PreemptSource> source_;
  collective::Collective* collective_;
  std::thread poller_;
  mutable absl::Mutex mu_;
  bool master_said_ ABSL_GUARDED_BY(mu_) = false;  // the poller's answer
  // The master's reason once it said stop; else why ShouldPreempt() first said true.
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_PREEMPT_H_
