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
// Memory: per request its id, a few numbers and its place in two ordered indexes (its pool
// and group are shared; a label is kept only when set). A pass allocates nothing once the
// buffers it reuses have grown to the site's size (placements, streams, snapshots).
//
// Not thread-safe: one owner calls everything.
#ifndef DET_MASTER_SCHEDULER_INCREMENTAL_H_
#define DET_MASTER_SCHEDULER_INCREMENTAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
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
  // among requests of equal (priority, seq). `tag`: the caller's number for it (Tag()).
  // REQUIRES: a request's label stays the same while it is set (ChangedReasons).
  void SetRequest(const Request& request, uint64_t tag = 0);
  // The tag request `id` was set with; 0 for an unknown id.
  uint64_t Tag(const std::string& id) const;
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

  // Where ChangedReasons() passes what changed. A request waiting behind its pool's
  // blocker ("waiting behind B (priority P)") is passed once, when it starts waiting
  // behind (behind), and its pool's text once per blocker (behind_reason): a freed agent
  // that moves the blocker of 100,000 requests is one behind_reason, not 100,000 reasons.
  struct ReasonSink {
    // `id` waits for `reason` (a reason of its own).
    std::function<void(const std::string& id, const std::string& reason)> changed;
    // `id` waits behind the blocker of resource pool `pool`: its reason is the pool's
    // latest behind_reason, whichever request the blocker is.
    std::function<void(const std::string& id, const std::string& pool)> behind;
    // The reason of every request waiting behind `pool`'s blocker is now `reason`. Passed
    // before any `behind` of the same call.
    std::function<void(const std::string& pool, const std::string& reason)> behind_reason;
  };
  // The waiting reasons that changed since the last call (all of them on the first call,
  // and on the first call after ReportAllReasons()): for every request that waits now with
  // a reason other than the one last passed for it (a request set anew counts as never
  // passed), `changed` or `behind`; and `behind_reason` for every pool whose blocker's text
  // changed. Placed requests are not passed. Costs O(requests whose reason may have
  // changed): those the last two reported passes visited, those set since, the groups
  // whose max_slots context changed, and of a pool whose blocker changed only the requests
  // of the old and new blocker's priorities (the others behind it keep waiting behind,
  // their text is the pool's), or of the blocker's priority when what the pool offers
  // after the blocker changed.
  // REQUIRES: as WaitingReason (Schedule() was called and nothing changed since).
  void ChangedReasons(const ReasonSink& sink);
  // The reason of one waiting request as ChangedReasons would pass it (for a caller that
  // lost its record of it), without changing what the next ChangedReasons passes. Nothing
  // for a placed or unknown request. REQUIRES: as WaitingReason.
  void PassReason(const std::string& id, const ReasonSink& sink) const;
  // The next ChangedReasons() passes every waiting request's reason (the caller's record
  // of them was lost).
  void ReportAllReasons() { report_all_ = true; }

  // How a blocker is named in the reasons of the requests behind it, when its Request's
  // label is empty (instead of its id): the label is then made only for a blocker, not
  // kept for every request (a large queue's memory). The labeler gets the request as set
  // (its label empty) and its tag.
  void SetLabeler(std::function<std::string(const Request&, uint64_t tag)> labeler) {
    labeler_ = std::move(labeler);
  }

  size_t num_agents() const { return agents_.size(); }
  size_t num_requests() const { return requests_.size(); }
  // Requests the last pass visited (the rest waited behind a blocker; see above).
  size_t last_pass_visited() const { return visited_; }

 private:
  struct Agent;
  struct Req;
  struct Pool;
  // Orders requests_ by id; finds by id without a copy of it.
  struct ById {
    using is_transparent = void;
    static absl::string_view Id(absl::string_view id) { return id; }
    static absl::string_view Id(const std::unique_ptr<Req>& q);
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Id(a) < Id(b);
    }
  };
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
    bool operator==(const Key& o) const {
      return priority == o.priority && seq == o.seq && arrival == o.arrival;
    }
  };
  // Why a visited request waits (or that it was placed), formatted when asked.
  // Summarize() adds all else a reason's text depends on, so that equal Outcomes mean equal
  // texts: kBehind (a: the blocker's priority, x: its arrival; a request's label must not
  // change), the request's slots and max_slots, its pool (x), the pool's sizes; kNone: never
  // reported.
  struct Outcome {
    enum Kind : uint8_t {
      kPlaced, kCapped, kNoAgents, kDisabled, kSingle, kMulti, kSizes, kBehind, kNone
    };
    Kind kind = kPlaced;
    int a = 0, b = 0, c = 0, d = 0;
    uint64_t x = 0;
    bool operator==(const Outcome& o) const {
      return kind == o.kind && a == o.a && b == o.b && c == o.c && d == o.d && x == o.x;
    }
    bool operator!=(const Outcome& o) const { return !(*this == o); }
  };
  // A group's placements in the last pass, in pass order, for the max_slots check of
  // requests the pass did not visit; kept across passes (their buffers reused), current
  // only when `pass` is the last pass.
  struct GroupPass {
    uint64_t pass = 0;
    std::vector<Key> keys;
    std::vector<int> slots_after;  // Slots given to the group up to and including keys[i].
    // What the last ChangedReasons() saw: whether the group was placed in the reported
    // pass, and then its keys and slots_after.
    bool reported = false;
    std::vector<Key> reported_keys;
    std::vector<int> reported_slots_after;
  };
  // One request stream of a pass's k-way merge (Schedule()).
  enum class StreamKind : uint8_t { kWithSlots, kZeroSlot, kSize };
  struct Stream;

  Pool& PoolNamed(const std::string& name);
  void Unindex(Agent* a);
  void Index(Agent* a);
  void AddAgentToPool(Agent* a);
  void RemoveAgentFromPool(Agent* a);
  bool Place(Pool& p, Req& q, Placement* out);
  const std::string& GroupOf(const Req& q) const;
  // The request as set (for the labeler).
  Request AsRequest(const Req& q) const;
  // A group name shared by the requests of that group; Release when a request drops it.
  const std::string* InternGroup(const std::string& group);
  void ReleaseGroup(const std::string* group);
  int HeldBefore(const Req& q) const;  // Group slots in use when the pass reached q.
  Outcome Summarize(const Req& q) const;  // Why q waits, compactly.
  std::string Format(const Req& q, const Outcome& out) const;
  void FormatTo(const Req& q, const Outcome& out, std::string* text) const;
  std::string Reason(const Req& q) const { return Format(q, Summarize(q)); }
  // Summarize() as ChangedReasons compares it: kBehind names the pool, not the blocker.
  Outcome Reported(const Req& q) const;
  std::string BehindText(const Req& blocker) const;
  void BehindTextTo(const Req& blocker, std::string* text) const;
  void Dirty(Req* q);
  void GroupIndexAdd(Req* q);
  void GroupIndexRemove(Req* q);
  void Changed() { fresh_ = false; }

  Fit fit_;
  std::function<std::string(const Request&, uint64_t)> labeler_;
  // B-trees, not hash maps: no rehash of the whole table inside a turn's changes.
  absl::btree_map<std::string, std::unique_ptr<Agent>> agents_;
  absl::btree_set<std::unique_ptr<Req>, ById> requests_;
  std::map<std::string, std::unique_ptr<Pool>> pools_;  // Never removed (Req::pool).
  std::map<std::string, int> groups_;  // Group -> requests of it (Req::group points here).
  absl::flat_hash_map<const Req*, std::string> labels_;  // Requests set with a label.
  absl::flat_hash_map<std::string, int> group_used_;
  uint64_t next_arrival_ = 0;

  // The last pass.
  bool fresh_ = false;  // Nothing changed since it ran.
  uint64_t pass_ = 0;
  size_t visited_ = 0;
  std::vector<Placement> placements_;
  std::vector<Agent*> touched_;  // Agents the running pass took slots from.
  absl::flat_hash_map<std::string, GroupPass> group_pass_;
  std::vector<Req*> visited_list_;  // The requests the last pass visited.
  // Reused by every pass (besides placements_): placements and shares of earlier passes
  // (at most kMaxSpare each), the merge's streams and heap, the agents a multi-agent
  // placement takes, a reason's text.
  static constexpr size_t kMaxSpare = 256;
  std::vector<Placement> spare_;
  std::vector<AgentShare> spare_shares_;
  std::vector<Stream> streams_;
  std::vector<std::pair<Key, size_t>> heap_;
  std::vector<Agent*> take_;
  std::string text_;

  // Reason reporting (ChangedReasons): what the last report saw.
  bool reporting_ = false;  // ChangedReasons() was called: removed requests wait in graveyard_.
  bool report_all_ = true;
  uint64_t report_ = 0;                // Stamps Req::checked.
  std::vector<Req*> dirty_;            // Set since the last report.
  std::vector<Req*> reported_visited_;  // Visited by the last reported pass.
  std::vector<std::string> used_changed_;  // Groups SetGroupUsed changed since.
  // Requests that can be held back by max_slots (group_max_slots > 0, slots > 0), by group.
  absl::flat_hash_map<const std::string*, std::vector<Req*>> by_group_;
  std::vector<std::unique_ptr<Req>> graveyard_;  // Removed since the last report.
};

}  // namespace det::master::scheduler

#endif  // DET_MASTER_SCHEDULER_INCREMENTAL_H_
