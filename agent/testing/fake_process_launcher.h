// A ProcessLauncher for tests that starts nothing: each "worker" is a record the test ends
// (Exit) and inspects (the spec it was started with, the signals it got).
#ifndef DET_AGENT_TESTING_FAKE_PROCESS_LAUNCHER_H_
#define DET_AGENT_TESTING_FAKE_PROCESS_LAUNCHER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/supervisor/process_launcher.h"

namespace det::agent {

// One fake worker; shared by the launcher (for the test) and its Process. Thread-safe.
class FakeWorker {
 public:
  FakeWorker(pid_t pid, WorkerSpec spec) : pid_(pid), spec_(std::move(spec)) {}
  pid_t pid() const { return pid_; }
  const WorkerSpec& spec() const { return spec_; }
  // Ends the worker: Wait returns `exit` from now on.
  void Exit(ExitStatus status, std::string note = "") {
    absl::MutexLock l(&mu_);
    if (!exit_) exit_ = WorkerExit{status, std::move(note)};
  }
  // The worker ends, killed by the signal, when it gets one of `signals` (SIGKILL always).
  void DieOn(std::vector<int> signals) {
    absl::MutexLock l(&mu_);
    die_on_ = std::move(signals);
  }
  std::vector<int> signals() {
    absl::MutexLock l(&mu_);
    return signals_;
  }
  bool exited() {
    absl::MutexLock l(&mu_);
    return exit_.has_value();
  }
  void Signal(int sig) {
    absl::MutexLock l(&mu_);
    signals_.push_back(sig);
    bool dies = sig == 9;
    for (int s : die_on_) dies |= s == sig;
    if (dies && !exit_) exit_ = WorkerExit{ExitStatus{0, sig}, ""};
  }
  std::optional<WorkerExit> Wait(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exit_.has_value(); };
    mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
    return exit_;
  }

 private:
  const pid_t pid_;
  const WorkerSpec spec_;
  absl::Mutex mu_;
  std::optional<WorkerExit> exit_ ABSL_GUARDED_BY(mu_);
  std::vector<int> signals_ ABSL_GUARDED_BY(mu_);
  std::vector<int> die_on_ ABSL_GUARDED_BY(mu_);
};

class FakeProcess : public Process {
 public:
  explicit FakeProcess(std::shared_ptr<FakeWorker> worker) : worker_(std::move(worker)) {}
  pid_t pid() const override { return worker_->pid(); }
  uint64_t start_ticks() const override { return 1000 + worker_->pid(); }
  absl::Status SignalGroup(int sig) override {
    worker_->Signal(sig);
    return absl::OkStatus();
  }
  std::optional<WorkerExit> Wait(absl::Duration timeout) override { return worker_->Wait(timeout); }

 private:
  std::shared_ptr<FakeWorker> worker_;
};

// Thread-safe.
class FakeProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<std::unique_ptr<Process>> Start(const WorkerSpec& spec) override {
    absl::MutexLock l(&mu_);
    if (!start_error_.ok()) return start_error_;
    auto w = std::make_shared<FakeWorker>(next_pid_++, spec);
    workers_.push_back(w);
    return std::unique_ptr<Process>(new FakeProcess(w));
  }
  // A worker this launcher started (as if it outlived an agent process), or else one that
  // has already exited (status 255, as the shim's missing exit file reads).
  std::unique_ptr<Process> Adopt(pid_t pid, uint64_t start_ticks,
                                 const std::string& exit_path) override {
    absl::MutexLock l(&mu_);
    adopted_.push_back(pid);
    for (const auto& w : workers_) {
      if (w->pid() == pid && 1000 + static_cast<uint64_t>(pid) == start_ticks) {
        return std::unique_ptr<Process>(new FakeProcess(w));
      }
    }
    auto gone = std::make_shared<FakeWorker>(pid, WorkerSpec{});
    gone->Exit(ExitStatus{255, 0}, "gone");
    return std::unique_ptr<Process>(new FakeProcess(gone));
  }

  // Start fails with `st` from now on (OK: starts again).
  void FailStarts(absl::Status st) {
    absl::MutexLock l(&mu_);
    start_error_ = std::move(st);
  }
  std::vector<std::shared_ptr<FakeWorker>> workers() {
    absl::MutexLock l(&mu_);
    return workers_;
  }
  std::vector<pid_t> adopted() {
    absl::MutexLock l(&mu_);
    return adopted_;
  }

 private:
  absl::Mutex mu_;
  absl::Status start_error_ ABSL_GUARDED_BY(mu_);
  pid_t next_pid_ ABSL_GUARDED_BY(mu_) = 100;
  std::vector<std::shared_ptr<FakeWorker>> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<pid_t> adopted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::agent

#endif  // DET_AGENT_TESTING_FAKE_PROCESS_LAUNCHER_H_
