#include "master/scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace det::master::scheduler {
namespace {

struct AgentState {
  const AgentView* view;
  std::vector<std::string> free;  // Shrinks as the pass places requests.
};

std::string Plural(int n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// Places `r` on `pool` agents, or returns why not (placement left empty).
std::string Place(const Request& r, std::vector<AgentState*>& pool, Fit fit, Placement* out) {
  std::vector<AgentState*> enabled;
  for (AgentState* a : pool) {
    if (a->view->enabled) enabled.push_back(a);
  }
  if (pool.empty()) return absl::StrCat("no agents in resource pool '", r.pool, "'");
  if (enabled.empty()) {
    return absl::StrCat("all ", Plural(static_cast<int>(pool.size()), "agent"), " in resource pool '",
                        r.pool, "' are disabled");
  }
  if (r.slots == 0) {
    AgentState* best = *std::max_element(enabled.begin(), enabled.end(), [](auto* a, auto* b) {
      return a->free.size() < b->free.size() ||
             (a->free.size() == b->free.size() && a->view->id > b->view->id);
    });
    out->agents.push_back({best->view->id, {}});
    return "";
  }
  int largest = 0, total_free = 0, most_free = 0;
  for (AgentState* a : enabled) {
    largest = std::max(largest, a->view->num_slots);
    total_free += static_cast<int>(a->free.size());
    most_free = std::max(most_free, static_cast<int>(a->free.size()));
  }
  if (r.slots <= largest) {
    AgentState* chosen = nullptr;
    for (AgentState* a : enabled) {
      int free = static_cast<int>(a->free.size());
      if (free < r.slots) continue;
      if (!chosen) {
        chosen = a;
        continue;
      }
      int best = static_cast<int>(chosen->free.size());
      bool better = fit == Fit::kBestFit ? free < best : free > best;
      if (better || (free == best && a->view->id < chosen->view->id)) chosen = a;
    }
    if (!chosen) {
      return absl::StrCat("needs ", Plural(r.slots, "free slot"), " on one agent; the most free on "
                          "any agent in resource pool '", r.pool, "' is ", most_free, " (",
                          total_free, " free in all)");
    }
    std::vector<std::string> taken(chosen->free.begin(), chosen->free.begin() + r.slots);
    chosen->free.erase(chosen->free.begin(), chosen->free.begin() + r.slots);
    out->agents.push_back({chosen->view->id, std::move(taken)});
    return "";
  }
  // Multi-agent: whole idle agents of one size.
  std::map<int, std::vector<AgentState*>, std::greater<int>> idle_by_size;
  std::map<int, int, std::greater<int>> count_by_size;
  for (AgentState* a : enabled) {
    int n = a->view->num_slots;
    if (n == 0) continue;
    count_by_size[n]++;
    if (static_cast<int>(a->free.size()) == n) idle_by_size[n].push_back(a);
  }
  std::string why;
  for (const auto& [size, count] : count_by_size) {
    if (r.slots % size != 0) continue;
    int needed = r.slots / size;
    auto& idle = idle_by_size[size];
    if (static_cast<int>(idle.size()) >= needed) {
      std::sort(idle.begin(), idle.end(),
                [](auto* a, auto* b) { return a->view->id < b->view->id; });
      for (int i = 0; i < needed; ++i) {
        out->agents.push_back({idle[i]->view->id, idle[i]->free});
        idle[i]->free.clear();
      }
      return "";
    }
    if (why.empty()) {
      why = absl::StrCat("needs ", needed, " idle ", size, "-slot agents in resource pool '", r.pool,
                         "'; ", idle.size(), " of ", count, " are idle");
    }
  }
  if (!why.empty()) return why;
  std::string sizes;
  for (const auto& [size, count] : count_by_size) {
    absl::StrAppend(&sizes, sizes.empty() ? "" : " or ", size);
  }
  return absl::StrCat(r.slots, " slots requested; agents in resource pool '", r.pool, "' have ",
                      sizes, " slots; a multi-agent trial must use a multiple of that");
}

}  // namespace

Decision Schedule(const std::vector<AgentView>& agents, const std::vector<Request>& queue,
                  Fit fit) {
  std::vector<AgentState> states;
  states.reserve(agents.size());
  for (const auto& a : agents) states.push_back({&a, a.enabled ? a.free_slots : std::vector<std::string>{}});
  std::map<std::string, std::vector<AgentState*>> pools;
  for (auto& s : states) pools[s.view->pool].push_back(&s);

  std::vector<const Request*> order;
  for (const auto& r : queue) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](const Request* a, const Request* b) {
    return a->priority != b->priority ? a->priority < b->priority : a->seq < b->seq;
  });

  Decision d;
  // Per pool: the most important request that could not be placed.
  std::map<std::string, const Request*> blocker;
  for (const Request* r : order) {
    auto b = blocker.find(r->pool);
    if (b != blocker.end() && b->second->priority < r->priority) {
      d.waiting[r->id] = absl::StrCat("waiting behind ", b->second->id, " (priority ",
                                      b->second->priority, ")");
      continue;
    }
    Placement p;
    p.request_id = r->id;
    std::string why = Place(*r, pools[r->pool], fit, &p);
    if (why.empty()) {
      d.placements.push_back(std::move(p));
    } else {
      d.waiting[r->id] = why;
      blocker.emplace(r->pool, r);
    }
  }
  return d;
}

}  // namespace det::master::scheduler
