#include "master/scheduler/incremental.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det::master::scheduler {
namespace {

std::string Plural(int n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

[[noreturn]] void Impossible(const char* what) {
  std::fprintf(stderr, "IncrementalScheduler: %s\n", what);
  std::abort();
}

bool SameAgent(const AgentView& a, const AgentView& b) {
  return a.id == b.id && a.pool == b.pool && a.num_slots == b.num_slots &&
         a.enabled == b.enabled && a.free_slots == b.free_slots;
}

}  // namespace

namespace {
struct AgentById {
  template <typename A>
  bool operator()(const A* a, const A* b) const {
    return a->view.id < b->view.id;
  }
};
}  // namespace

struct IncrementalScheduler::Agent {
  using ById = std::set<Agent*, AgentById>;
  AgentView view;
  Pool* pool = nullptr;
  // Slots the running pass has taken, from the front of view.free_slots; 0 between passes.
  int taken = 0;
  int free() const { return view.enabled ? static_cast<int>(view.free_slots.size()) - taken : 0; }
  // Its nodes of the pool's indexes while out of them (Unindex): moved back by Index, so
  // that a placement's re-indexing allocates nothing.
  ById::node_type free_node, idle_node;
};

// A request as set, compactly (one per queued trial of a large site): its priority and
// seq are in `key`, its pool and group shared, its label (if any) in labels_.
struct IncrementalScheduler::Req {
  std::string id;
  int slots = 0;
  int group_max_slots = 0;
  Pool* pool = nullptr;
  const std::string* group = nullptr;  // In groups_; nullptr for none.
  uint64_t tag = 0;
  Key key{};
  // The last pass that visited this request, and what became of it there.
  uint64_t pass = 0;
  Outcome out;
  // Reason reporting: what the last ChangedReasons() passed (or learnt) for it, the last
  // report that checked it, whether it was set since, whether it was removed since.
  Outcome reported{Outcome::kNone};
  uint64_t checked = 0;
  bool dirty = false, removed = false;
  uint32_t group_pos = kNoPos;  // In by_group_[group], if there.
  static constexpr uint32_t kNoPos = ~uint32_t{0};
  int priority() const { return key.priority; }
};

absl::string_view IncrementalScheduler::ById::Id(const std::unique_ptr<Req>& q) { return q->id; }

struct IncrementalScheduler::Stream {
  absl::btree_set<Key>::const_iterator it, end;
  Pool* pool;
  StreamKind kind;
  int slots;  // kSize: the size.
};


struct IncrementalScheduler::Pool {
  // No agents yet: no sizes, as number 0.
  explicit Pool(std::string n) : name(std::move(n)) { sizes_ids.emplace("", 0); }
  using ById = Agent::ById;

  std::string name;
  int agents = 0, enabled = 0, total_free = 0;
  // The sizes of count_by_size, as a waiting reason lists them ("4 or 8"), and a number
  // for each such list the pool has had (Outcome::x of kSizes).
  std::string sizes;
  uint64_t sizes_id = 0;
  std::map<std::string, uint64_t> sizes_ids;
  void SizesChanged() {
    sizes.clear();
    for (const auto& [size, count] : count_by_size) {
      absl::StrAppend(&sizes, sizes.empty() ? "" : " or ", size);
    }
    sizes_id = sizes_ids.emplace(sizes, sizes_ids.size()).first->second;
  }
  std::map<int, int> count_by_size;  // Enabled agents with slots, by size.
  std::vector<ById> by_free;         // Enabled agents by free slot count.
  std::map<int, ById> idle_by_size;  // Enabled agents with every slot free, by size.
  // This pool's requests in pass order; those with slots and zero-slot ones apart.
  absl::btree_set<Key> with_slots, zero_slot;
  // Those with slots again, by (priority, slots): where a pass looks past the blocker.
  std::map<std::pair<int, int>, absl::btree_set<Key>> by_priority_size;

  // The last pass: the first request with slots that could not be placed, and what the
  // pool offered when it failed and after each placement that followed.
  const Req* blocker = nullptr;
  struct Snapshot {
    Key after;  // Holds for requests after this one (until the next snapshot).
    int most_free = 0, total_free = 0;
    absl::InlinedVector<std::pair<int, int>, 4> idle;  // (size, idle agents), largest first.
    bool operator==(const Snapshot& o) const {
      return after == o.after && most_free == o.most_free && total_free == o.total_free &&
             idle == o.idle;
    }
  };
  std::vector<Snapshot> since_blocker;

  void Enqueue(const Key& k, int slots) {
    if (slots == 0) {
      zero_slot.insert(k);
      return;
    }
    with_slots.insert(k);
    by_priority_size[{k.priority, slots}].insert(k);
  }
  void Dequeue(const Key& k, int slots) {
    if (slots == 0) {
      zero_slot.erase(k);
      return;
    }
    with_slots.erase(k);
    auto it = by_priority_size.find({k.priority, slots});
    it->second.erase(k);
    if (it->second.empty()) by_priority_size.erase(it);
  }
  int MostFree() const {
    for (int f = static_cast<int>(by_free.size()) - 1; f > 0; --f) {
      if (!by_free[f].empty()) return f;
    }
    return 0;
  }
  int Idle(int size) const {
    auto it = idle_by_size.find(size);
    return it == idle_by_size.end() ? 0 : static_cast<int>(it->second.size());
  }
  // Whether a request of `slots` > 0 would be placed now.
  bool Fits(int slots) const {
    if (agents == 0 || enabled == 0) return false;
    if (slots <= largest()) return MostFree() >= slots;
    for (auto it = count_by_size.rbegin(); it != count_by_size.rend(); ++it) {
      if (slots % it->first == 0 && Idle(it->first) >= slots / it->first) return true;
    }
    return false;
  }
  void Snap(const Key& after) {
    Snapshot s{after, MostFree(), total_free, {}};
    for (auto it = count_by_size.rbegin(); it != count_by_size.rend(); ++it) {
      s.idle.push_back({it->first, Idle(it->first)});
    }
    since_blocker.push_back(std::move(s));
  }

  int largest() const { return count_by_size.empty() ? 0 : count_by_size.rbegin()->first; }

  // What the last ChangedReasons() saw of this pool.
  static constexpr uint64_t kNoBlocker = ~uint64_t{0};
  uint64_t reported_blocker = kNoBlocker;  // Its arrival.
  int reported_blocker_priority = 0;
  std::vector<Snapshot> reported_since_blocker;
  int reported_agents = 0, reported_enabled = 0;
  std::map<int, int> reported_count_by_size;
  std::string reported_behind;  // The last behind_reason passed ("" none yet).
};


IncrementalScheduler::IncrementalScheduler(Fit fit) : fit_(fit) {}
IncrementalScheduler::~IncrementalScheduler() = default;

IncrementalScheduler::Pool& IncrementalScheduler::PoolNamed(const std::string& name) {
  auto it = pools_.find(name);
  if (it == pools_.end()) it = pools_.emplace(name, std::make_unique<Pool>(name)).first;
  return *it->second;
}

void IncrementalScheduler::Index(Agent* a) {
  Pool& p = *a->pool;
  int f = a->free();
  if (static_cast<int>(p.by_free.size()) <= f) p.by_free.resize(f + 1);
  auto insert = [a](Pool::ById& set, Pool::ById::node_type& node) {
    if (node.empty()) {
      set.insert(a);
    } else {
      set.insert(std::move(node));
    }
  };
  insert(p.by_free[f], a->free_node);
  p.total_free += f;
  if (f == a->view.num_slots && f > 0) insert(p.idle_by_size[f], a->idle_node);
}

void IncrementalScheduler::Unindex(Agent* a) {
  Pool& p = *a->pool;
  int f = a->free();
  a->free_node = p.by_free[f].extract(a);
  p.total_free -= f;
  if (f == a->view.num_slots && f > 0) a->idle_node = p.idle_by_size[f].extract(a);
}

void IncrementalScheduler::AddAgentToPool(Agent* a) {
  a->pool = &PoolNamed(a->view.pool);
  Pool& p = *a->pool;
  ++p.agents;
  if (!a->view.enabled) return;
  ++p.enabled;
  if (a->view.num_slots > 0 && p.count_by_size[a->view.num_slots]++ == 0) p.SizesChanged();
  Index(a);
}

void IncrementalScheduler::RemoveAgentFromPool(Agent* a) {
  Pool& p = *a->pool;
  --p.agents;
  if (!a->view.enabled) return;
  --p.enabled;
  if (a->view.num_slots > 0 && --p.count_by_size[a->view.num_slots] == 0) {
    p.count_by_size.erase(a->view.num_slots);
    p.SizesChanged();
  }
  Unindex(a);
}

void IncrementalScheduler::SetAgent(const AgentView& agent) {
  auto it = agents_.find(agent.id);
  if (it != agents_.end()) {
    if (SameAgent(it->second->view, agent)) return;
    RemoveAgentFromPool(it->second.get());
    it->second->view = agent;
  } else {
    it = agents_.emplace(agent.id, std::make_unique<Agent>()).first;
    it->second->view = agent;
  }
  AddAgentToPool(it->second.get());
  Changed();
}

void IncrementalScheduler::RemoveAgent(const std::string& id) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return;
  RemoveAgentFromPool(it->second.get());
  agents_.erase(it);
  Changed();
}

const std::string* IncrementalScheduler::InternGroup(const std::string& group) {
  if (group.empty()) return nullptr;
  auto it = groups_.try_emplace(group, 0).first;
  ++it->second;
  return &it->first;
}

void IncrementalScheduler::ReleaseGroup(const std::string* group) {
  if (group == nullptr) return;
  auto it = groups_.find(*group);
  if (--it->second == 0) groups_.erase(it);
}

const std::string& IncrementalScheduler::GroupOf(const Req& q) const {
  static const std::string* const kNone = new std::string();
  return q.group ? *q.group : *kNone;
}

Request IncrementalScheduler::AsRequest(const Req& q) const {
  Request r;
  r.id = q.id;
  r.slots = q.slots;
  r.priority = q.key.priority;
  r.seq = q.key.seq;
  r.pool = q.pool->name;
  r.group = GroupOf(q);
  r.group_max_slots = q.group_max_slots;
  if (auto l = labels_.find(&q); l != labels_.end()) r.label = l->second;
  return r;
}

void IncrementalScheduler::SetRequest(const Request& request, uint64_t tag) {
  auto it = requests_.find(absl::string_view(request.id));
  Req* q;
  if (it != requests_.end()) {
    q = it->get();
    if (q->slots == request.slots && q->key.priority == request.priority &&
        q->key.seq == request.seq && q->pool->name == request.pool &&
        GroupOf(*q) == request.group && q->group_max_slots == request.group_max_slots &&
        q->tag == tag) {
      return;
    }
    q->pool->Dequeue(q->key, q->slots);
    GroupIndexRemove(q);
    if (GroupOf(*q) != request.group) {
      ReleaseGroup(q->group);
      q->group = InternGroup(request.group);
    }
    if (request.label.empty()) {
      labels_.erase(q);
    } else {
      labels_[q] = request.label;
    }
  } else {
    auto owned = std::make_unique<Req>();
    q = owned.get();
    q->id = request.id;
    q->key.arrival = next_arrival_++;
    q->key.req = q;
    q->group = InternGroup(request.group);
    requests_.insert(std::move(owned));
    if (!request.label.empty()) labels_[q] = request.label;
  }
  q->slots = request.slots;
  q->group_max_slots = request.group_max_slots;
  q->pool = &PoolNamed(request.pool);
  q->tag = tag;
  q->key.priority = request.priority;
  q->key.seq = request.seq;
  q->pool->Enqueue(q->key, q->slots);
  GroupIndexAdd(q);
  Dirty(q);
  Changed();
}

uint64_t IncrementalScheduler::Tag(const std::string& id) const {
  auto it = requests_.find(absl::string_view(id));
  return it == requests_.end() ? 0 : (*it)->tag;
}

void IncrementalScheduler::Dirty(Req* q) {
  if (!reporting_ || q->dirty) return;
  q->dirty = true;
  dirty_.push_back(q);
}

void IncrementalScheduler::GroupIndexAdd(Req* q) {
  if (q->group_max_slots <= 0 || q->slots <= 0) return;
  std::vector<Req*>& v = by_group_[q->group];
  q->group_pos = static_cast<uint32_t>(v.size());
  v.push_back(q);
}

void IncrementalScheduler::GroupIndexRemove(Req* q) {
  if (q->group_pos == Req::kNoPos) return;
  auto it = by_group_.find(q->group);
  std::vector<Req*>& v = it->second;
  v[q->group_pos] = v.back();
  v[q->group_pos]->group_pos = q->group_pos;
  v.pop_back();
  q->group_pos = Req::kNoPos;
  if (v.empty()) by_group_.erase(it);
}

void IncrementalScheduler::RemoveRequest(const std::string& id) {
  auto it = requests_.find(absl::string_view(id));
  if (it == requests_.end()) return;
  Req* q = it->get();
  q->pool->Dequeue(q->key, q->slots);
  GroupIndexRemove(q);
  labels_.erase(q);
  // The group by its name: GroupIndexRemove above needed the pointer.
  ReleaseGroup(q->group);
  q->group = nullptr;
  auto node = requests_.extract(it);
  if (reporting_) {
    // Lists of the last report may still point at it (ChangedReasons skips it).
    q->removed = true;
    graveyard_.push_back(std::move(node.value()));
  }
  Changed();
}

void IncrementalScheduler::SetGroupUsed(const std::string& group, int slots) {
  auto it = group_used_.find(group);
  if (slots == 0) {
    if (it == group_used_.end()) return;
    group_used_.erase(it);
  } else {
    if (it != group_used_.end() && it->second == slots) return;
    group_used_[group] = slots;
  }
  if (reporting_) used_changed_.push_back(group);
  Changed();
}

bool IncrementalScheduler::Place(Pool& p, Req& q, Placement* out) {
  const int slots = q.slots;
  // out->agents[shares]: the next share, its buffers reused from an earlier pass.
  size_t shares = 0;
  auto share = [&](const std::string& agent_id) -> AgentShare& {
    if (shares == out->agents.size()) {
      if (spare_shares_.empty()) {
        out->agents.emplace_back();
      } else {
        out->agents.push_back(std::move(spare_shares_.back()));
        spare_shares_.pop_back();
      }
    }
    AgentShare& s = out->agents[shares++];
    s.agent_id = agent_id;
    return s;
  };
  auto placed = [&] {
    while (out->agents.size() > shares) {
      if (spare_shares_.size() < kMaxSpare) spare_shares_.push_back(std::move(out->agents.back()));
      out->agents.pop_back();
    }
    return true;
  };
  if (p.agents == 0) {
    q.out = {Outcome::kNoAgents};
    return false;
  }
  if (p.enabled == 0) {
    q.out = {Outcome::kDisabled, p.agents};
    return false;
  }
  const int top = static_cast<int>(p.by_free.size()) - 1;
  if (slots == 0) {
    for (int f = top; f >= 0; --f) {
      if (!p.by_free[f].empty()) {
        share((*p.by_free[f].begin())->view.id).slots.clear();
        return placed();
      }
    }
    q.out = {Outcome::kNoAgents};
    return false;
  }
  if (slots <= p.largest()) {
    Agent* chosen = nullptr;
    if (fit_ == Fit::kBestFit) {
      for (int f = slots; f <= top && !chosen; ++f) {
        if (!p.by_free[f].empty()) chosen = *p.by_free[f].begin();
      }
    } else {
      for (int f = top; f >= slots && !chosen; --f) {
        if (!p.by_free[f].empty()) chosen = *p.by_free[f].begin();
      }
    }
    if (!chosen) {
      int most_free = 0;
      for (int f = top; f > 0; --f) {
        if (!p.by_free[f].empty()) {
          most_free = f;
          break;
        }
      }
      q.out = {Outcome::kSingle, most_free, p.total_free};
      return false;
    }
    if (chosen->taken == 0) touched_.push_back(chosen);
    Unindex(chosen);
    auto first = chosen->view.free_slots.begin() + chosen->taken;
    share(chosen->view.id).slots.assign(first, first + slots);
    chosen->taken += slots;
    Index(chosen);
    return placed();
  }
  // Multi-agent: whole idle agents of one size, the largest size that can provide N.
  bool why = false;
  for (auto it = p.count_by_size.rbegin(); it != p.count_by_size.rend(); ++it) {
    const int size = it->first;
    if (slots % size != 0) continue;
    const int needed = slots / size;
    auto idle_it = p.idle_by_size.find(size);
    const int idle = idle_it == p.idle_by_size.end() ? 0 : static_cast<int>(idle_it->second.size());
    if (idle >= needed) {
      take_.clear();
      for (auto a = idle_it->second.begin(); static_cast<int>(take_.size()) < needed; ++a) {
        take_.push_back(*a);
      }
      for (Agent* a : take_) {
        touched_.push_back(a);  // Idle: nothing taken from it yet in this pass.
        Unindex(a);
        share(a->view.id).slots = a->view.free_slots;
        a->taken = static_cast<int>(a->view.free_slots.size());
        Index(a);
      }
      return placed();
    }
    if (!why) {
      q.out = {Outcome::kMulti, needed, size, idle, it->second};
      why = true;
    }
  }
  if (!why) q.out = {Outcome::kSizes};
  return false;
}

const std::vector<Placement>& IncrementalScheduler::Schedule() {
  if (fresh_) return placements_;
  ++pass_;
  visited_ = 0;
  // placements_[placed]: the next placement, its buffers reused from an earlier pass.
  size_t placed = 0;
  touched_.clear();
  visited_list_.clear();

  // A k-way merge, in pass order, of request streams. Each pool starts with two: its
  // requests with slots, and its zero-slot ones. Once the pool has a blocker, its first
  // stream ends (the pass holds back everything less important) and is replaced by one
  // stream per size among the rest of the blocker's priority; a size's stream ends when
  // the pool can no longer fit that size (free slots only shrink during a pass, so none
  // after it would fit either: they wait for the reason the pool's snapshot gives).
  std::vector<Stream>& streams = streams_;
  streams.clear();
  for (auto& [name, p] : pools_) {
    p->blocker = nullptr;
    p->since_blocker.clear();
    if (!p->with_slots.empty()) {
      streams.push_back({p->with_slots.begin(), p->with_slots.end(), p.get(), StreamKind::kWithSlots, 0});
    }
    if (!p->zero_slot.empty()) {
      streams.push_back({p->zero_slot.begin(), p->zero_slot.end(), p.get(), StreamKind::kZeroSlot, 0});
    }
  }
  // A min-heap of each stream's next request.
  auto later = [](const std::pair<Key, size_t>& a, const std::pair<Key, size_t>& b) {
    return b.first < a.first;
  };
  std::vector<std::pair<Key, size_t>>& heap = heap_;
  heap.clear();
  auto push = [&](const Key& k, size_t i) {
    heap.emplace_back(k, i);
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i < streams.size(); ++i) push(*streams[i].it, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const auto [key, i] = heap.back();
    heap.pop_back();
    Stream* s = &streams[i];
    if (s->kind == StreamKind::kSize && !s->pool->Fits(s->slots)) continue;
    Req& q = *key.req;
    ++visited_;
    visited_list_.push_back(&q);
    q.pass = pass_;
    bool capped = false;
    if (q.group_max_slots > 0 && q.slots > 0) {
      const int held = HeldBefore(q);
      if (held + q.slots > q.group_max_slots) {
        q.out = {Outcome::kCapped, held};
        capped = true;
      }
    }
    Pool& pool = *s->pool;
    if (!capped) {
      if (placed == placements_.size()) {
        if (spare_.empty()) {
          placements_.emplace_back();
        } else {
          placements_.push_back(std::move(spare_.back()));
          spare_.pop_back();
        }
      }
      Placement& pl = placements_[placed];
      pl.request_id = q.id;
      if (Place(pool, q, &pl)) {
        ++placed;
        q.out = {Outcome::kPlaced};
        if (q.group != nullptr && q.slots > 0) {
          GroupPass& g = group_pass_[*q.group];
          if (g.pass != pass_) {
            g.pass = pass_;
            g.keys.clear();
            g.slots_after.clear();
          }
          g.keys.push_back(key);
          g.slots_after.push_back((g.slots_after.empty() ? 0 : g.slots_after.back()) + q.slots);
        }
        if (pool.blocker && q.slots > 0) pool.Snap(key);
      } else {
        if (s->kind == StreamKind::kSize) {
          Impossible("a request of a size the pool fits was not placed");
        } else if (q.slots > 0 && !pool.blocker) {
          pool.blocker = &q;
          pool.Snap(key);
          // The rest of the blocker's priority, one stream per size (this may grow
          // `streams`: `s` is not used after).
          auto first = pool.by_priority_size.lower_bound({q.priority(), 0});
          for (auto it = first; it != pool.by_priority_size.end() && it->first.first == q.priority(); ++it) {
            auto next = it->second.upper_bound(key);
            if (next == it->second.end()) continue;
            streams.push_back({next, it->second.end(), &pool, StreamKind::kSize, it->first.second});
            push(*next, streams.size() - 1);
          }
          continue;  // The stream of requests with slots ends here.
        }
      }
    }
    s = &streams[i];
    if (++s->it == s->end) continue;
    push(*s->it, i);
  }
  while (placements_.size() > placed) {
    if (spare_.size() < kMaxSpare) spare_.push_back(std::move(placements_.back()));
    placements_.pop_back();
  }
  // Back to the state between passes: the caller reports what it starts (SetAgent).
  for (Agent* a : touched_) {
    Unindex(a);
    a->taken = 0;
    Index(a);
  }
  touched_.clear();
  fresh_ = true;
  return placements_;
}

int IncrementalScheduler::HeldBefore(const Req& q) const {
  int held = 0;
  const std::string& group = GroupOf(q);
  if (auto u = group_used_.find(group); u != group_used_.end()) held = u->second;
  if (q.group == nullptr) return held;
  auto g = group_pass_.find(group);
  if (g == group_pass_.end() || g->second.pass != pass_) return held;
  const auto& keys = g->second.keys;
  size_t n = std::lower_bound(keys.begin(), keys.end(), q.key) - keys.begin();
  return n == 0 ? held : held + g->second.slots_after[n - 1];
}

IncrementalScheduler::Outcome IncrementalScheduler::Summarize(const Req& q) const {
  Outcome out = q.out;
  const Pool& pl = *q.pool;
  if (q.pass != pass_) {
    // Not visited: held back by max_slots, or else waiting behind its pool's blocker.
    const bool limited = q.group_max_slots > 0 && q.slots > 0;
    const int held = limited ? HeldBefore(q) : 0;
    if (limited && held + q.slots > q.group_max_slots) {
      out = {Outcome::kCapped, held};
    } else {
      if (!pl.blocker || q.slots == 0) {
        Impossible("a request the pass did not visit has no blocker");
      }
      const Req* b = pl.blocker;
      if (q.priority() > b->priority()) {
        out = {Outcome::kBehind, b->priority()};
        out.x = b->key.arrival;
        return out;
      }
      // Of the blocker's priority, a size the pool could no longer fit: what the pool
      // offered then.
      auto snap = std::upper_bound(pl.since_blocker.begin(), pl.since_blocker.end(), q.key,
                                   [](const Key& k, const Pool::Snapshot& s) { return k < s.after; });
      if (snap == pl.since_blocker.begin()) Impossible("a skipped request before its blocker");
      --snap;
      if (pl.agents == 0) {
        out = {Outcome::kNoAgents};
      } else if (pl.enabled == 0) {
        out = {Outcome::kDisabled, pl.agents};
      } else if (q.slots <= pl.largest()) {
        out = {Outcome::kSingle, snap->most_free, snap->total_free};
      } else {
        out = {Outcome::kSizes};
        for (const auto& [size, idle] : snap->idle) {
          if (q.slots % size != 0) continue;
          out = {Outcome::kMulti, q.slots / size, size, idle, pl.count_by_size.at(size)};
          break;
        }
      }
    }
  }
  // What else the text says: the request's own fields, its pool, the pool's sizes.
  const uint64_t pool = reinterpret_cast<uintptr_t>(&pl);
  switch (out.kind) {
    case Outcome::kCapped:
      out.b = q.group_max_slots;
      out.c = q.slots;
      break;
    case Outcome::kNoAgents:
    case Outcome::kDisabled:
    case Outcome::kMulti:
      out.x = pool;
      break;
    case Outcome::kSingle:
      out.c = q.slots;
      out.x = pool;
      break;
    case Outcome::kSizes:
      out.a = q.slots;
      out.b = static_cast<int>(pl.sizes_id);
      out.x = pool;
      break;
    default:
      break;
  }
  return out;
}

std::string IncrementalScheduler::Format(const Req& q, const Outcome& out) const {
  std::string text;
  FormatTo(q, out, &text);
  return text;
}

void IncrementalScheduler::FormatTo(const Req& q, const Outcome& out, std::string* text) const {
  text->clear();
  const std::string& pool = q.pool->name;
  switch (out.kind) {
    case Outcome::kPlaced:
    case Outcome::kNone:
      return;
    case Outcome::kBehind:
      *text = BehindText(*q.pool->blocker);
      return;
    case Outcome::kCapped:
      absl::StrAppend(text, "max_slots ", q.group_max_slots, " of its experiment reached (",
                      Plural(out.a, "slot"), " in use, needs ", q.slots, " more)");
      return;
    case Outcome::kNoAgents:
      absl::StrAppend(text, "no agents in resource pool '", pool, "'");
      return;
    case Outcome::kDisabled:
      absl::StrAppend(text, "all ", Plural(out.a, "agent"), " in resource pool '", pool,
                      "' are disabled");
      return;
    case Outcome::kSingle:
      absl::StrAppend(text, "needs ", q.slots, q.slots == 1 ? " free slot" : " free slots",
                      " on one agent; the most free on any agent in resource pool '", pool,
                      "' is ", out.a, " (", out.b, " free in all)");
      return;
    case Outcome::kMulti:
      absl::StrAppend(text, "needs ", out.a, " idle ", out.b, "-slot agents in resource pool '",
                      pool, "'; ", out.c, " of ", out.d, " are idle");
      return;
    case Outcome::kSizes:
      absl::StrAppend(text, q.slots, " slots requested; agents in resource pool '", pool,
                      "' have ", q.pool->sizes,
                      " slots; a multi-agent trial must use a multiple of that");
      return;
  }
}

std::string IncrementalScheduler::WaitingReason(const std::string& id) const {
  if (!fresh_) Impossible("WaitingReason() about a pass the state has changed since");
  auto it = requests_.find(absl::string_view(id));
  return it == requests_.end() ? "" : Reason(**it);
}

bool IncrementalScheduler::Capped(const std::string& id) const {
  if (!fresh_) Impossible("Capped() about a pass the state has changed since");
  auto it = requests_.find(absl::string_view(id));
  if (it == requests_.end()) return false;
  const Req& q = **it;
  if (q.pass == pass_) return q.out.kind == Outcome::kCapped;
  return q.group_max_slots > 0 && q.slots > 0 && HeldBefore(q) + q.slots > q.group_max_slots;
}

Decision IncrementalScheduler::ToDecision() const {
  if (!fresh_) Impossible("ToDecision() about a pass the state has changed since");
  Decision d;
  d.placements = placements_;
  for (const auto& q : requests_) {
    if (q->pass == pass_ && q->out.kind == Outcome::kPlaced) continue;
    d.waiting[q->id] = Reason(*q);
    if (Capped(q->id)) d.capped.insert(q->id);
  }
  return d;
}

std::string IncrementalScheduler::BehindText(const Req& blocker) const {
  std::string text;
  BehindTextTo(blocker, &text);
  return text;
}

void IncrementalScheduler::BehindTextTo(const Req& blocker, std::string* text) const {
  text->clear();
  const auto l = labels_.find(&blocker);
  if (l != labels_.end()) {
    absl::StrAppend(text, "waiting behind ", l->second);
  } else if (labeler_) {
    absl::StrAppend(text, "waiting behind ", labeler_(AsRequest(blocker), blocker.tag));
  } else {
    absl::StrAppend(text, "waiting behind ", blocker.id);
  }
  absl::StrAppend(text, " (priority ", blocker.priority(), ")");
}

IncrementalScheduler::Outcome IncrementalScheduler::Reported(const Req& q) const {
  Outcome out = Summarize(q);
  if (out.kind == Outcome::kBehind) {
    out = {Outcome::kBehind};
    out.x = reinterpret_cast<uintptr_t>(q.pool);
  }
  return out;
}

void IncrementalScheduler::PassReason(const std::string& id, const ReasonSink& sink) const {
  if (!fresh_) Impossible("PassReason() about a pass the state has changed since");
  auto it = requests_.find(absl::string_view(id));
  if (it == requests_.end()) return;
  const Req& q = **it;
  const Outcome out = Summarize(q);
  if (out.kind == Outcome::kPlaced) return;
  if (out.kind == Outcome::kBehind) {
    sink.behind(q.id, q.pool->name);
  } else {
    sink.changed(q.id, Format(q, out));
  }
}

void IncrementalScheduler::ChangedReasons(const ReasonSink& sink) {
  if (!fresh_) Impossible("ChangedReasons() about a pass the state has changed since");
  ++report_;
  const bool all = report_all_;
  // First each pool's text for the requests behind its blocker: one string however many
  // wait behind it (made only when the blocker is another than the last report's).
  for (auto& [name, p] : pools_) {
    if (all) p->reported_behind.clear();  // The caller's record of the texts is lost too.
    const Req* b = p->blocker;
    if (!b) continue;
    if (!p->reported_behind.empty() && b->key.arrival == p->reported_blocker &&
        b->priority() == p->reported_blocker_priority && !b->dirty) {
      continue;
    }
    BehindTextTo(*b, &text_);
    if (text_ == p->reported_behind) continue;
    sink.behind_reason(name, text_);
    p->reported_behind = text_;
  }
  auto check = [&](Req* q) {
    if (q->removed || q->checked == report_) return;
    q->checked = report_;
    const Outcome out = Reported(*q);
    if (out.kind == Outcome::kPlaced || (!all && out == q->reported)) {
      q->reported = out;
      return;
    }
    q->reported = out;
    if (out.kind == Outcome::kBehind) {
      sink.behind(q->id, q->pool->name);
    } else {
      FormatTo(*q, out, &text_);
      sink.changed(q->id, text_);
    }
  };
  // The requests of `priority` in pool `p`.
  auto check_priority = [&](Pool& p, int priority) {
    for (auto it = p.by_priority_size.lower_bound({priority, 0});
         it != p.by_priority_size.end() && it->first.first == priority; ++it) {
      for (const Key& k : it->second) check(k.req);
    }
  };
  if (all) {
    for (auto& q : requests_) check(q.get());
  } else {
    for (Req* q : dirty_) check(q);
    for (Req* q : reported_visited_) check(q);
    for (Req* q : visited_list_) check(q);
    for (auto& [name, p] : pools_) {
      const Req* b = p->blocker;
      const uint64_t arrival = b ? b->key.arrival : Pool::kNoBlocker;
      if (arrival != p->reported_blocker || (b && (b->dirty || b->priority() != p->reported_blocker_priority))) {
        // Another blocker. A request neither pass visited, set since or of a group whose
        // context changed was held back by max_slots in both (the same held slots), or
        // waited behind in both (its text is the pool's), unless it is of the old or the
        // new blocker's priority (then the slots the pool offered may be its reason). With
        // no blocker in either pass, that pass visited every request of the pool.
        if (p->reported_blocker != Pool::kNoBlocker) check_priority(*p, p->reported_blocker_priority);
        if (b) check_priority(*p, b->priority());
      } else if (b && (p->since_blocker != p->reported_since_blocker ||
                       p->agents != p->reported_agents || p->enabled != p->reported_enabled ||
                       p->count_by_size != p->reported_count_by_size)) {
        // The blocker's priority: what the pool offered after the blocker changed.
        for (auto it = p->by_priority_size.lower_bound({b->priority(), 0});
             it != p->by_priority_size.end() && it->first.first == b->priority(); ++it) {
          for (auto k = it->second.upper_bound(b->key); k != it->second.end(); ++k) check(k->req);
        }
      }
    }
    // Groups whose max_slots context changed: every request it may hold back.
    auto recheck_group = [&](const std::string& group) {
      const std::string* key = nullptr;  // The requests of no group ("").
      if (!group.empty()) {
        auto g = groups_.find(group);
        if (g == groups_.end()) return;
        key = &g->first;
      }
      auto it = by_group_.find(key);
      if (it == by_group_.end()) return;
      for (Req* q : it->second) check(q);
    };
    for (const std::string& g : used_changed_) recheck_group(g);
    for (const auto& [g, gp] : group_pass_) {
      const bool now = gp.pass == pass_;
      if (now != gp.reported ||
          (now && (gp.keys != gp.reported_keys || gp.slots_after != gp.reported_slots_after))) {
        recheck_group(g);
      }
    }
  }
  // What this report saw, for the next (buffers reused). Groups placed in neither pass are
  // forgotten once there are many.
  for (Req* q : dirty_) q->dirty = false;
  dirty_.clear();
  reported_visited_ = visited_list_;
  constexpr size_t kMaxIdleGroups = 1024;
  const bool prune = group_pass_.size() > kMaxIdleGroups;
  for (auto it = group_pass_.begin(); it != group_pass_.end();) {
    GroupPass& gp = it->second;
    gp.reported = gp.pass == pass_;
    if (gp.reported) {
      gp.reported_keys = gp.keys;
      gp.reported_slots_after = gp.slots_after;
    } else if (prune) {
      group_pass_.erase(it++);
      continue;
    }
    ++it;
  }
  used_changed_.clear();
  for (auto& [name, p] : pools_) {
    p->reported_blocker = p->blocker ? p->blocker->key.arrival : Pool::kNoBlocker;
    p->reported_blocker_priority = p->blocker ? p->blocker->priority() : 0;
    p->reported_since_blocker = p->since_blocker;
    p->reported_agents = p->agents;
    p->reported_enabled = p->enabled;
    p->reported_count_by_size = p->count_by_size;
  }
  graveyard_.clear();
  report_all_ = false;
  reporting_ = true;
}

}  // namespace det::master::scheduler
