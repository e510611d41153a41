// The allocations this agent runs, by id.
#ifndef DET_AGENT_ALLOCATIONS_ALLOCATION_TABLE_H_
#define DET_AGENT_ALLOCATIONS_ALLOCATION_TABLE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/allocations/allocation.h"
#include "agent/outbox/outbox.h"

namespace det::agent {

// Thread-safe. Lock order: the table's lock before an allocation's.
class AllocationTable {
 public:
  // Replaces an allocation of the same id.
  void Add(std::shared_ptr<Allocation> allocation);
  // Null when there is none.
  std::shared_ptr<Allocation> Find(const std::string& id);
  bool Contains(const std::string& id);
  bool empty();
  size_t size();
  std::vector<std::string> ids();
  // Allocation::Kill on `id`, if it is here.
  void Kill(const std::string& id, const std::string& reason, absl::Time deadline,
            bool agent_stopping);
  // Every worker of every allocation has exited.
  bool AllExited();
  // Notes (and records) what the master accepted.
  void Delivered(const std::vector<Outgoing>& batch);
  // Removes and returns the allocations that are finished (Allocation::Finished) and, unless
  // `even_if_unreported`, have no line still queued (`has_queued_lines(id)`): their run dir
  // stays until then, so that an agent restarted before they ship sends them again from the
  // workers' output files.
  std::vector<std::shared_ptr<Allocation>> TakeFinished(
      bool even_if_unreported, const std::function<bool(const std::string&)>& has_queued_lines);
  // The supervisor threads of every allocation (for the caller to join).
  std::vector<std::thread> TakeSupervisors();

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Allocation>> allocations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::agent

#endif  // DET_AGENT_ALLOCATIONS_ALLOCATION_TABLE_H_
