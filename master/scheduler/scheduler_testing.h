// Test helpers for the scheduler's tests: agents and requests in one line.
#ifndef DET_MASTER_SCHEDULER_SCHEDULER_TESTING_H_
#define DET_MASTER_SCHEDULER_SCHEDULER_TESTING_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "master/scheduler/scheduler.h"

namespace det::master::scheduler::fixtures {

// An agent `id` with `size` slots of which the first `used` are taken.
inline AgentView Agent(const std::string& id, int size, int used = 0,
                       std::string pool = "default") {
  AgentView a;
  a.id = id;
  a.pool = std::move(pool);
  a.num_slots = size;
  for (int i = used; i < size; ++i) a.free_slots.push_back(absl::StrCat(i));
  return a;
}

inline Request Req(const std::string& id, int slots, int priority = 42, int64_t seq = 0) {
  Request r;
  r.id = id;
  r.slots = slots;
  r.priority = priority;
  r.seq = seq;
  return r;
}

}  // namespace det::master::scheduler::fixtures

#endif  // DET_MASTER_SCHEDULER_SCHEDULER_TESTING_H_
