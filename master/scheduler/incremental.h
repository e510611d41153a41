// IncrementalScheduler: the placement policy of Schedule() (scheduler.h) over state kept
// between passes, for large sites. The cluster view (agents and each pool's free-slot
// indexes) and the queue (each pool's requests in (priority, seq) order) are updated by
// deltas; a pass then visits only the requests whose outcome it must work out:
//   - in each pool, every request until one with slots cannot be placed (the pool's
//     blocker); after it, of the blocker's priority only those of a size the pool can
//     still fit (free slots only shrink during a pass), and the zero-slot requests;
//   - every other request waits: behind the blocker, held back by its group's max_slots,
//     or (of the blocker's priority) for the slots the pool had when its turn came. Those
//     reasons are derived when asked (WaitingReason, ToDecision) from the blocker, the
//     slots each group was given earlier in the pass and snapshots of the pool's free
//     slots taken at the blocker and after each placement that followed it.
// Reasons are kept compact and formatted only when asked.
//
// Same placements, same reasons and same capped set as Schedule(agents, queue, fit,
// group_used) where `queue` lists the requests in the order they were first set
// (the tie-break between equal (priority, seq)) — incremental_test checks this on
// randomized sequences of changes.
//
// Not thread-safe: one owner calls everything.
#ifndef DET_MASTER_SCHEDULER_INCREMENTAL_H_
#define DET_MASTER_SCHEDULER_INCREMENTAL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "master/scheduler/scheduler.h"

namespace det::master::scheduler {

class IncrementalScheduler {
 public:
  explicit IncrementalScheduler(Fit fit);
  IncrementalScheduler(const IncrementalScheduler&) = delete;
  IncrementalScheduler& operator=(const IncrementalScheduler&) = delete;
  ~IncrementalScheduler();

  // Adds the agent or replaces the one with its id (free slots, pool, enabled, size).
  void SetAgent(const AgentView& agent);
  // No-op for an unknown id.
  void RemoveAgent(const std::string& id);
  // Adds the request or replaces the one with its id; a replaced request keeps its place
  // among requests of equal (priority, seq).
  void SetRequest(const Request& request);
  // No-op for an unknown id.
  void RemoveRequest(const std::string& id);
  // Slots the group's running allocations hold (Schedule's `group_used`); 0 clears it.
  void SetGroupUsed(const std::string& group, int slots);

  // One pass. Returns the placements, in the order Schedule() lists them. If nothing
  // changed since the last pass, returns its result without a new pass. The reference is
  // valid until the next call of any method that changes state.
  const std::vector<Placement>& Schedule();

  // About the last pass. REQUIRES: Schedule() was called and nothing changed since
  // (checked: the process aborts).
  // Why `id` waits; "" for a placed or unknown request.
  std::string WaitingReason(const std::string& id) const;
  // Whether `id` waits for its group's max_slots (Decision::capped).
  bool Capped(const std::string& id) const;
  // The whole decision, as Schedule() returns it: O(queue) strings.
  Decision ToDecision() const;

  size_t num_agents() const { return agents_.size(); }
  size_t num_requests() const { return requests_.size(); }
  // Requests the last pass visited (the rest waited behind a blocker; see above).
  size_t last_pass_visited() const { return visited_; }

 private:
  struct Agent;
  struct Req;
  struct Pool;
  struct Key {
    int priority;
    int64_t seq;
    uint64_t arrival;
    Req* req;
    bool operator<(const Key& o) const {
      if (priority != o.priority) return priority < o.priority;
      if (seq != o.seq) return seq < o.seq;
      return arrival < o.arrival;
    }
  };
  // Why a visited request waits (or that it was placed), formatted when asked.
  struct Outcome {
    enum Kind : uint8_t { kPlaced, kCapped, kNoAgents, kDisabled, kSingle, kMulti, kSizes };
    Kind kind = kPlaced;
    int a = 0, b = 0, c = 0, d = 0;
  };
  // A group's placements in the last pass, in pass order, for the max_slots check of
  // requests the pass did not visit.
  struct GroupPass {
    std::vector<Key> keys;
    std::vector<int> slots_after;  // Slots given to the group up to and including keys[i].
  };

  Pool& PoolNamed(const std::string& name);
  void Unindex(Agent* a);
  void Index(Agent* a);
  void AddAgentToPool(Agent* a);
  void RemoveAgentFromPool(Agent* a);
  bool Place(Pool& p, Req& q, Placement* out);
  int HeldBefore(const Req& q) const;  // Group slots in use when the pass reached q.
  std::string Reason(const Req& q) const;
  void Changed() { fresh_ = false; }

  Fit fit_;
  // B-trees, not hash maps: no rehash of the whole table inside a turn's changes.
  absl::btree_map<std::string, std::unique_ptr<Agent>> agents_;
  absl::btree_map<std::string, std::unique_ptr<Req>> requests_;
  std::map<std::string, std::unique_ptr<Pool>> pools_;
  absl::flat_hash_map<std::string, int> group_used_;
  uint64_t next_arrival_ = 0;

  // The last pass.
  bool fresh_ = false;  // Nothing changed since it ran.
  uint64_t pass_ = 0;
  size_t visited_ = 0;
  std::vector<Placement> placements_;
  std::vector<Agent*> touched_;  // Agents the running pass took slots from.
  absl::flat_hash_map<std::string, GroupPass> group_pass_;
};

}  // namespace det::master::scheduler

#endif  // DET_MASTER_SCHEDULER_INCREMENTAL_H_
