// Finding the allocations a previous agent process left in work_dir.
#ifndef DET_AGENT_ALLOCATIONS_RESTORE_H_
#define DET_AGENT_ALLOCATIONS_RESTORE_H_

#include <memory>
#include <string>
#include <vector>

#include "agent/allocations/allocation.h"
#include "agent/supervisor/process_launcher.h"

namespace det::agent {

struct RestoredAllocation {
  std::shared_ptr<Allocation> allocation;
  // "rank R (pid P, running)" or "(..., exited)" for each worker not known to have exited.
  std::vector<std::string> adopted;
  // The ranks not known to have exited.
  std::vector<int> running;
  // The master accepted the report of its launch.
  bool launched_reported = false;
};

// The allocations recorded under work_dir/run (supervisor/allocation_record.h), by id, their
// workers adopted through `launcher`. A run dir without a readable record is removed (and
// logged).
std::vector<RestoredAllocation> RestoreAllocations(const std::string& work_dir,
                                                   ProcessLauncher& launcher);

}  // namespace det::agent

#endif  // DET_AGENT_ALLOCATIONS_RESTORE_H_
