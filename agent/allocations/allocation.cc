#include "agent/allocations/allocation.h"

#include <signal.h>

#include <filesystem>
#include <utility>

#include "agent/supervisor/allocation_record.h"
#include "common/logging/logging.h"

namespace det::agent {

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) Logger("agent")->warn("cannot remove {}: {}", path, ec.message());
}

Allocation::Allocation(v1::LaunchCommand launch, std::string work_dir, std::string run_dir,
                       std::vector<Worker> workers, Stopping stopping, bool launched_reported)
    : launch_(std::move(launch)),
      work_dir_(std::move(work_dir)),
      run_dir_(std::move(run_dir)),
      workers_(std::move(workers)) {
  absl::MutexLock l(&mu_);
  for (const Worker& w : workers_) states_.push_back({w.exited, w.exit_reported, w.shipped});
  stopping_ = stopping;
  launched_reported_ = launched_reported;
}

bool Allocation::Kill(const std::string& reason, absl::Time deadline, bool agent_stopping) {
  absl::MutexLock l(&mu_);
  stopping_.agent_stopping |= agent_stopping;
  if (stopping_.killing) {
    PersistLocked();
    return false;
  }
  stopping_.killing = true;
  stopping_.kill_deadline = deadline;
  Logger("agent")->info("allocation {}: stopping ({})", id(), reason);
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].process && !states_[i].exited) {
      workers_[i].process->SignalGroup(SIGTERM).IgnoreError();
    }
  }
  PersistLocked();
  return true;
}

Allocation::Stopping Allocation::stopping() {
  absl::MutexLock l(&mu_);
  return stopping_;
}

std::array<int64_t, 2> Allocation::shipped(int worker) {
  absl::MutexLock l(&mu_);
  return states_[worker].shipped;
}

bool Allocation::exited(int worker) {
  absl::MutexLock l(&mu_);
  return states_[worker].exited;
}

void Allocation::MarkExited(int worker) {
  absl::MutexLock l(&mu_);
  states_[worker].exited = true;
}

bool Allocation::AllExited() {
  absl::MutexLock l(&mu_);
  for (const WorkerState& s : states_) {
    if (!s.exited) return false;
  }
  return true;
}

bool Allocation::Finished(bool even_if_unreported) {
  absl::MutexLock l(&mu_);
  for (const WorkerState& s : states_) {
    if (!s.exited || !(s.exit_reported || even_if_unreported)) return false;
  }
  return true;
}

void Allocation::Delivered(const Outgoing& o) {
  absl::MutexLock l(&mu_);
  if (o.launched) launched_reported_ = true;
  const int rank = o.line ? o.line->rank() : o.exit ? o.exit->rank() : -1;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].rank.rank() != rank) continue;
    WorkerState& s = states_[i];
    if (o.line && o.stream >= 0) s.shipped[o.stream] = std::max(s.shipped[o.stream], o.end_offset);
    if (o.exit) s.exit_reported = true;
  }
}

void Allocation::Persist() {
  absl::MutexLock l(&mu_);
  PersistLocked();
}

void Allocation::PersistLocked() {
  AllocationRecord r;
  r.launch = launch_;
  r.launched_reported = launched_reported_;
  r.killing = stopping_.killing;
  r.kill_deadline_ms = stopping_.killing ? absl::ToUnixMillis(stopping_.kill_deadline) : 0;
  r.agent_stopping = stopping_.agent_stopping;
  for (size_t i = 0; i < workers_.size(); ++i) {
    WorkerRecord& wr = r.workers.emplace_back();
    wr.rank = workers_[i].rank.rank();
    if (workers_[i].process) {
      wr.pid = workers_[i].process->pid();
      wr.start_ticks = workers_[i].process->start_ticks();
    }
    wr.shipped[0] = states_[i].shipped[0];
    wr.shipped[1] = states_[i].shipped[1];
    wr.exit_reported = states_[i].exit_reported;
  }
  absl::Status st = WriteAllocationRecord(run_dir_, r);
  if (!st.ok()) {
    Logger("agent")->warn("allocation {}: cannot write its record: {}", id(), st.ToString());
  }
}

void Allocation::AddSupervisor(std::thread t) {
  absl::MutexLock l(&mu_);
  supervisors_.push_back(std::move(t));
}

std::vector<std::thread> Allocation::TakeSupervisors() {
  absl::MutexLock l(&mu_);
  return std::exchange(supervisors_, {});
}

}  // namespace det::agent
