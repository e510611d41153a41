#include "agent/allocations/allocation_table.h"

#include <set>
#include <utility>

namespace det::agent {

void AllocationTable::Add(std::shared_ptr<Allocation> allocation) {
  absl::MutexLock l(&mu_);
  std::string id = allocation->id();
  allocations_[id] = std::move(allocation);
}

std::shared_ptr<Allocation> AllocationTable::Find(const std::string& id) {
  absl::MutexLock l(&mu_);
  auto it = allocations_.find(id);
  return it == allocations_.end() ? nullptr : it->second;
}

bool AllocationTable::Contains(const std::string& id) {
  absl::MutexLock l(&mu_);
  return allocations_.count(id) > 0;
}

bool AllocationTable::empty() {
  absl::MutexLock l(&mu_);
  return allocations_.empty();
}

size_t AllocationTable::size() {
  absl::MutexLock l(&mu_);
  return allocations_.size();
}

std::vector<std::string> AllocationTable::ids() {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, a] : allocations_) out.push_back(id);
  return out;
}

void AllocationTable::Kill(const std::string& id, const std::string& reason, absl::Time deadline,
                           bool agent_stopping) {
  absl::MutexLock l(&mu_);
  auto it = allocations_.find(id);
  if (it != allocations_.end()) it->second->Kill(reason, deadline, agent_stopping);
}

bool AllocationTable::AllExited() {
  absl::MutexLock l(&mu_);
  for (const auto& [id, a] : allocations_) {
    if (!a->AllExited()) return false;
  }
  return true;
}

void AllocationTable::Delivered(const std::vector<Outgoing>& batch) {
  absl::MutexLock l(&mu_);
  std::set<Allocation*> touched;
  for (const Outgoing& o : batch) {
    auto it = allocations_.find(o.allocation_id());
    if (it == allocations_.end()) continue;
    it->second->Delivered(o);
    touched.insert(it->second.get());
  }
  for (Allocation* a : touched) a->Persist();
}

std::vector<std::shared_ptr<Allocation>> AllocationTable::TakeFinished(
    bool even_if_unreported, const std::function<bool(const std::string&)>& has_queued_lines) {
  std::vector<std::shared_ptr<Allocation>> done;
  absl::MutexLock l(&mu_);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    bool finished = it->second->Finished(even_if_unreported) &&
                    (even_if_unreported || !has_queued_lines(it->first));
    if (finished) {
      done.push_back(std::move(it->second));
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  return done;
}

std::vector<std::thread> AllocationTable::TakeSupervisors() {
  absl::MutexLock l(&mu_);
  std::vector<std::thread> out;
  for (auto& [id, a] : allocations_) {
    for (std::thread& t : a->TakeSupervisors()) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace det::agent
