// Placement policy: a pure function from an immutable view of the cluster and the queue of
// resource requests to placements and, for every request left waiting, the reason why.
// No I/O, no clock, no state.
#ifndef DET_MASTER_SCHEDULER_SCHEDULER_H_
#define DET_MASTER_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace det::master::scheduler {

struct AgentView {
  std::string id;
  std::string pool;
  // Every slot the agent has.
  int num_slots = 0;
  // Slots that are enabled and not used by any allocation, in slot order.
  std::vector<std::string> free_slots;
  bool enabled = true;
};

struct Request {
  std::string id;
  int slots = 1;
  // 1..99, lower is more important.
  int priority = 42;
  // Submission order; lower first within a priority.
  int64_t seq = 0;
  std::string pool = "default";
  // The job it belongs to (an experiment: "exp-3"), and that job's resources.max_slots:
  // at most this many slots held by the job's requests at once (running ones included,
  // see Schedule's `group_used`); 0 = unlimited.
  std::string group;
  int group_max_slots = 0;
  // How users read this request in another's waiting reason ("trial 27 of experiment 5");
  // `id` when empty.
  std::string label;

  const std::string& Label() const { return label.empty() ? id : label; }
};

struct AgentShare {
  std::string agent_id;
  std::vector<std::string> slots;
};

struct Placement {
  std::string request_id;
  // In rank order: the first agent hosts rank 0 (the chief).
  std::vector<AgentShare> agents;
};

struct Decision {
  std::vector<Placement> placements;
  // request id -> why it waits.
  std::map<std::string, std::string> waiting;
  // Those of `waiting` held back by their group's max_slots (freeing slots cannot help
  // them: never a reason to preempt).
  std::set<std::string> capped;
};

enum class Fit { kBestFit, kWorstFit };

// An allocation holding slots, as preemption sees it.
struct Running {
  std::string id;
  int priority = 42;
  int64_t seq = 0;
  std::string pool = "default";
  std::vector<AgentShare> agents;
};

// Gang placement. A request of N slots, N <= the largest agent of its pool, goes on one
// agent with N free slots (best fit: the fewest free; worst fit: the most; ties by id). A
// larger one takes N/S whole idle agents of size S, N a multiple of S (the largest such S
// with enough idle agents). Requests are taken by (priority, seq); one that cannot be
// placed does not stop others of its priority, but holds back all of lower priority.
// Zero-slot requests (checkpoint GC tasks) go on the enabled agent of their pool with the
// most free slots; they are never held back by a waiting request, nor hold others back.
// A request whose group would hold more than its group_max_slots (slots of `group_used`,
// group -> slots its running allocations hold, plus those placed in this pass) waits
// ("max_slots") without holding back others.
Decision Schedule(const std::vector<AgentView>& agents, const std::vector<Request>& queue, Fit fit,
                  const std::map<std::string, int>& group_used = {});

// For requests of `preemptible_pools` that Schedule() leaves waiting (zero-slot ones
// excepted: freeing slots cannot help them), the running
// allocations to stop so they can be placed: only less important ones (higher priority
// number), least important and most recently queued first, and no more than needed.
// `decision` is Schedule()'s result for the same inputs. Returns victim -> the request it
// makes room for.
std::map<std::string, std::string> SelectPreemptions(const std::vector<AgentView>& agents,
                                                     const std::vector<Request>& queue,
                                                     const std::vector<Running>& running,
                                                     const Decision& decision, Fit fit,
                                                     const std::vector<std::string>& preemptible_pools);

}  // namespace det::master::scheduler

#endif  // DET_MASTER_SCHEDULER_SCHEDULER_H_
