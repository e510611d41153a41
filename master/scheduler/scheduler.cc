#include "master/scheduler/scheduler.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace det::master::scheduler {
namespace {

std::string Plural(int n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

struct AgentState {
  const AgentView* view;
  std::vector<std::string> free;  // Shrinks as the pass places requests.
};

using ById = std::set<std::pair<std::string, AgentState*>>;

// The enabled agents of one pool, indexed so a placement costs O(slot sizes), not
// O(agents): by free slot count, and the idle ones by size.
class Pool {
 public:
  explicit Pool(std::string name) : name_(std::move(name)) {}

  void Add(AgentState* a) {
    ++agents_;
    if (!a->view->enabled) return;
    ++enabled_;
    int n = a->view->num_slots;
    if (n > 0) ++count_by_size_[n];
    largest_ = std::max(largest_, n);
    Index(a);
  }

  // Places `r` or returns why not.
  std::string Place(const Request& r, Fit fit, Placement* out) {
    if (agents_ == 0) return absl::StrCat("no agents in resource pool '", name_, "'");
    if (enabled_ == 0) {
      return absl::StrCat("all ", Plural(agents_, "agent"), " in resource pool '", name_,
                          "' are disabled");
    }
    if (r.slots == 0) {
      // The agent with the most free slots (lowest id among equals).
      for (int f = static_cast<int>(by_free_.size()) - 1; f >= 0; --f) {
        if (!by_free_[f].empty()) {
          out->agents.push_back({by_free_[f].begin()->first, {}});
          return "";
        }
      }
      return absl::StrCat("no agents in resource pool '", name_, "'");
    }
    if (r.slots <= largest_) {
      AgentState* chosen = nullptr;
      int top = static_cast<int>(by_free_.size()) - 1;
      if (fit == Fit::kBestFit) {
        for (int f = r.slots; f <= top && !chosen; ++f) {
          if (!by_free_[f].empty()) chosen = by_free_[f].begin()->second;
        }
      } else {
        for (int f = top; f >= r.slots && !chosen; --f) {
          if (!by_free_[f].empty()) chosen = by_free_[f].begin()->second;
        }
      }
      if (!chosen) {
        int most_free = 0;
        for (int f = top; f > 0; --f) {
          if (!by_free_[f].empty()) {
            most_free = f;
            break;
          }
        }
        return absl::StrCat("needs ", Plural(r.slots, "free slot"),
                            " on one agent; the most free on any agent in resource pool '", name_,
                            "' is ", most_free, " (", total_free_, " free in all)");
      }
      Unindex(chosen);
      std::vector<std::string> taken(chosen->free.begin(), chosen->free.begin() + r.slots);
      chosen->free.erase(chosen->free.begin(), chosen->free.begin() + r.slots);
      Index(chosen);
      out->agents.push_back({chosen->view->id, std::move(taken)});
      return "";
    }
    // Multi-agent: whole idle agents of one size, the largest size that can provide N.
    std::string why;
    for (auto it = count_by_size_.rbegin(); it != count_by_size_.rend(); ++it) {
      int size = it->first;
      if (r.slots % size != 0) continue;
      int needed = r.slots / size;
      ById& idle = idle_by_size_[size];
      if (static_cast<int>(idle.size()) >= needed) {
        std::vector<AgentState*> take;
        for (auto a = idle.begin(); static_cast<int>(take.size()) < needed; ++a) take.push_back(a->second);
        for (AgentState* a : take) {
          Unindex(a);
          out->agents.push_back({a->view->id, a->free});
          a->free.clear();
          Index(a);
        }
        return "";
      }
      if (why.empty()) {
        why = absl::StrCat("needs ", needed, " idle ", size, "-slot agents in resource pool '",
                           name_, "'; ", idle.size(), " of ", it->second, " are idle");
      }
    }
    if (!why.empty()) return why;
    std::string sizes;
    for (const auto& [size, count] : count_by_size_) {
      absl::StrAppend(&sizes, sizes.empty() ? "" : " or ", size);
    }
    return absl::StrCat(r.slots, " slots requested; agents in resource pool '", name_, "' have ",
                        sizes, " slots; a multi-agent trial must use a multiple of that");
  }

 private:
  void Index(AgentState* a) {
    int f = static_cast<int>(a->free.size());
    if (static_cast<int>(by_free_.size()) <= f) by_free_.resize(f + 1);
    by_free_[f].insert({a->view->id, a});
    total_free_ += f;
    if (f == a->view->num_slots && f > 0) idle_by_size_[f].insert({a->view->id, a});
  }
  void Unindex(AgentState* a) {
    int f = static_cast<int>(a->free.size());
    by_free_[f].erase({a->view->id, a});
    total_free_ -= f;
    if (f == a->view->num_slots && f > 0) idle_by_size_[f].erase({a->view->id, a});
  }

  std::string name_;
  int agents_ = 0, enabled_ = 0, largest_ = 0, total_free_ = 0;
  std::vector<ById> by_free_;
  std::map<int, ById> idle_by_size_;
  std::map<int, int> count_by_size_;
};

bool Before(const Request* a, const Request* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->seq < b->seq;
}

}  // namespace

Decision Schedule(const std::vector<AgentView>& agents, const std::vector<Request>& queue, Fit fit,
                  const std::map<std::string, int>& group_used) {
  std::vector<AgentState> states;
  states.reserve(agents.size());
  for (const auto& a : agents) {
    states.push_back({&a, a.enabled ? a.free_slots : std::vector<std::string>{}});
  }
  std::map<std::string, Pool> pools;
  for (auto& s : states) pools.try_emplace(s.view->pool, s.view->pool).first->second.Add(&s);

  std::vector<const Request*> order;
  order.reserve(queue.size());
  for (const auto& r : queue) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), Before);

  Decision d;
  // Per pool: the most important request that could not be placed.
  std::map<std::string, const Request*> blocker;
  std::map<std::string, int> used = group_used;  // Grows as the pass places requests.
  for (const Request* r : order) {
    if (r->group_max_slots > 0 && r->slots > 0) {
      const int held = used.count(r->group) ? used.at(r->group) : 0;
      if (held + r->slots > r->group_max_slots) {
        d.waiting[r->id] =
            absl::StrCat("max_slots ", r->group_max_slots, " of its experiment reached (",
                         Plural(held, "slot"), " in use, needs ", r->slots, " more)");
        d.capped.insert(r->id);
        continue;
      }
    }
    auto b = blocker.find(r->pool);
    // A zero-slot request takes nothing a blocked request needs: it is never held back,
    // and never holds others back.
    if (r->slots > 0 && b != blocker.end() && b->second->priority < r->priority) {
      d.waiting[r->id] = absl::StrCat("waiting behind ", b->second->Label(), " (priority ",
                                      b->second->priority, ")");
      continue;
    }
    Placement p;
    p.request_id = r->id;
    std::string why = pools.try_emplace(r->pool, r->pool).first->second.Place(*r, fit, &p);
    if (why.empty()) {
      if (!r->group.empty()) used[r->group] += r->slots;
      d.placements.push_back(std::move(p));
    } else {
      d.waiting[r->id] = why;
      if (r->slots > 0) blocker.emplace(r->pool, r);
    }
  }
  return d;
}

std::map<std::string, std::string> SelectPreemptions(
    const std::vector<AgentView>& agents, const std::vector<Request>& queue,
    const std::vector<Running>& running, const Decision& decision, Fit fit,
    const std::vector<std::string>& preemptible_pools) {
  std::map<std::string, std::string> victims;
  if (decision.waiting.empty() || running.empty()) return victims;
  // The cluster after this pass's placements.
  std::map<std::string, AgentView> view;
  for (const auto& a : agents) view[a.id] = a;
  auto take = [&](const std::vector<AgentShare>& shares) {
    for (const auto& s : shares) {
      auto& free = view[s.agent_id].free_slots;
      for (const auto& slot : s.slots) free.erase(std::remove(free.begin(), free.end(), slot), free.end());
    }
  };
  auto give = [&](std::map<std::string, AgentView>& v, const std::vector<AgentShare>& shares) {
    for (const auto& s : shares) {
      auto& free = v[s.agent_id].free_slots;
      free.insert(free.end(), s.slots.begin(), s.slots.end());
      std::sort(free.begin(), free.end());
    }
  };
  for (const auto& p : decision.placements) take(p.agents);

  std::vector<const Request*> waiting;
  for (const auto& r : queue) {
    // Stopping allocations frees slots, which a zero-slot request does not need.
    if (r.slots > 0 && decision.waiting.count(r.id) && !decision.capped.count(r.id) &&
        std::find(preemptible_pools.begin(), preemptible_pools.end(), r.pool) !=
            preemptible_pools.end()) {
      waiting.push_back(&r);
    }
  }
  std::stable_sort(waiting.begin(), waiting.end(), Before);
  auto fits = [&](const std::map<std::string, AgentView>& v, const Request& r, Placement* p) {
    std::vector<AgentView> list;
    for (const auto& [id, a] : v) list.push_back(a);
    Decision d = Schedule(list, {r}, fit);
    if (d.placements.empty()) return false;
    *p = d.placements[0];
    return true;
  };
  for (const Request* r : waiting) {
    std::vector<const Running*> candidates;
    for (const auto& run : running) {
      if (run.pool == r->pool && run.priority > r->priority && !victims.count(run.id)) {
        candidates.push_back(&run);
      }
    }
    // Least important first, then most recently queued.
    std::sort(candidates.begin(), candidates.end(), [](const Running* a, const Running* b) {
      return a->priority != b->priority ? a->priority > b->priority : a->seq > b->seq;
    });
    std::vector<const Running*> chosen;
    auto trial = view;
    Placement p;
    bool ok = false;
    for (const Running* c : candidates) {
      give(trial, c->agents);
      chosen.push_back(c);
      if (fits(trial, *r, &p)) {
        ok = true;
        break;
      }
    }
    if (!ok) continue;
    // Keep only the victims the request needs, dropping the most important first.
    for (size_t i = 0; i < chosen.size() && chosen.size() > 1;) {
      auto without = view;
      for (size_t j = 0; j < chosen.size(); ++j) {
        if (j != i) give(without, chosen[j]->agents);
      }
      Placement q;
      if (fits(without, *r, &q)) {
        chosen.erase(chosen.begin() + i);
        p = q;
      } else {
        ++i;
      }
    }
    for (const Running* c : chosen) {
      victims[c->id] = r->id;
      give(view, c->agents);
    }
    take(p.agents);
  }
  return victims;
}

}  // namespace det::master::scheduler
