// Time of one scheduling pass, before and after, side by side in one run:
//   - before: Schedule() (master/scheduler/scheduler.h), the full recomputation every pass.
//     It is the commit before's algorithm, unchanged, compiled here with the same flags.
//   - after: IncrementalScheduler (master/scheduler/incremental.h) over the same state.
// Sizes: 1,000 agents x 8 slots with 10,000 pending trials (the old table's row) and
// 10,000 agents x 8 slots with 100,000 pending; a third of the agents partly busy, trials of
// sizes 1, 2, 4, 8, 16, 12 and priorities 1-99; at the large size also without the
// 12-slot trials (which never fit 8-slot agents and so block all below them), and without
// them at one priority (42), the case where a pass must try every pending trial.
//
// Each row runs 20 turns. A turn does what the master does between passes: the previous
// pass's placements start (their slots become used, the trials leave the queue), 10 trials
// are queued, 5 queued trials are removed, one queued trial changes priority and one busy
// agent's slots are freed. Then both algorithms run a pass on the same state; the first
// turn and every fifth compare the whole decisions (placements, every reason, capped).
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "master/scheduler/incremental.h"
#include "master/scheduler/scheduler.h"

namespace det::master::scheduler {
namespace {

double Ms(absl::Time start) { return absl::ToDoubleMilliseconds(absl::Now() - start); }

struct Stats {
  std::vector<double> ms;
  void Add(double v) { ms.push_back(v); }
  double Median() {
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
  double Max() { return *std::max_element(ms.begin(), ms.end()); }
};

bool SamePlacements(const std::vector<Placement>& a, const std::vector<Placement>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i];
    const auto& y = b[i];
    if (x.request_id != y.request_id || x.agents.size() != y.agents.size()) return false;
    for (size_t j = 0; j < x.agents.size(); ++j) {
      if (x.agents[j].agent_id != y.agents[j].agent_id || x.agents[j].slots != y.agents[j].slots) {
        return false;
      }
    }
  }
  return true;
}

bool SameDecision(const Decision& a, const Decision& b) {
  return SamePlacements(a.placements, b.placements) && a.waiting == b.waiting &&
         a.capped == b.capped;
}

enum class Mix {
  kAll,          // Sizes 1, 2, 4, 8, 16 and 12 (never placeable on 8-slot agents), priorities 1-99.
  kPlaceable,    // The same without 12.
  kOnePriority,  // The same without 12, every trial at priority 42 (no priority changes).
};

void Bench(Fit fit, const char* fit_name, int num_agents, int num_pending, Mix mix) {
  std::mt19937_64 rng(42);
  std::map<std::string, AgentView> agents;
  for (int i = 0; i < num_agents; ++i) {
    AgentView a;
    a.id = absl::StrCat("agent-", i);
    a.pool = "default";
    a.num_slots = 8;
    int used = i % 3 == 0 ? static_cast<int>(rng() % 8) : 0;
    for (int s = used; s < 8; ++s) a.free_slots.push_back(absl::StrCat(s));
    agents[a.id] = std::move(a);
  }
  const int sizes[] = {1, 1, 1, 2, 2, 4, 8, 16, 12};
  std::map<std::string, Request> requests;
  std::vector<std::string> order;  // Queue order (arrival).
  int next = 0;
  auto queue_one = [&] {
    Request r;
    r.id = absl::StrCat(next);
    r.slots = sizes[rng() % (mix == Mix::kAll ? 9 : 8)];
    r.priority = mix == Mix::kOnePriority ? 42 : 1 + static_cast<int>(rng() % 99);
    r.seq = next++;
    requests[r.id] = r;
    order.push_back(r.id);
    return r;
  };
  for (int i = 0; i < num_pending; ++i) queue_one();

  IncrementalScheduler inc(fit);
  absl::Time start = absl::Now();
  for (const auto& [id, a] : agents) inc.SetAgent(a);
  for (const auto& id : order) inc.SetRequest(requests.at(id));
  const double load_ms = Ms(start);

  Stats before, after, changes;
  double first_pass_ms = 0, materialize_ms = 0;
  size_t placed = 0, visited = 0, first_placed = 0;
  bool same = true;
  int compared = 0;
  std::vector<Placement> last;
  for (int turn = 0; turn < 20; ++turn) {
    // The turn's changes, applied to both states.
    std::vector<std::string> removed;
    std::vector<const AgentView*> changed_agents;
    std::vector<Request> queued;
    for (const auto& p : last) {
      for (const auto& share : p.agents) {
        AgentView& a = agents[share.agent_id];
        a.free_slots.erase(a.free_slots.begin(), a.free_slots.begin() + share.slots.size());
        changed_agents.push_back(&a);
      }
      removed.push_back(p.request_id);
    }
    if (turn > 0) {
      for (int i = 0; i < 10; ++i) queued.push_back(queue_one());
      for (int i = 0; i < 5; ++i) removed.push_back(order[rng() % order.size()]);
      if (mix != Mix::kOnePriority) {
        Request& r = requests[order[rng() % order.size()]];
        r.priority = 1 + static_cast<int>(rng() % 99);
        queued.push_back(r);
      }
      AgentView& a = agents[absl::StrCat("agent-", 3 * (rng() % (num_agents / 3)))];
      a.free_slots.clear();
      for (int s = 0; s < 8; ++s) a.free_slots.push_back(absl::StrCat(s));
      changed_agents.push_back(&a);
    }
    std::sort(removed.begin(), removed.end());
    removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
    for (const auto& id : removed) {
      requests.erase(id);
      order.erase(std::find(order.begin(), order.end(), id));
    }
    start = absl::Now();
    for (const AgentView* a : changed_agents) inc.SetAgent(*a);
    for (const auto& id : removed) inc.RemoveRequest(id);
    for (const auto& r : queued) {
      if (requests.count(r.id)) inc.SetRequest(requests.at(r.id));
    }
    if (turn > 0) changes.Add(Ms(start));

    // Before: the full recomputation over the same state.
    Decision d;
    {
      std::vector<AgentView> view;
      view.reserve(agents.size());
      for (const auto& [id, a] : agents) view.push_back(a);
      std::vector<Request> queue;
      queue.reserve(order.size());
      for (const auto& id : order) queue.push_back(requests.at(id));
      start = absl::Now();
      d = Schedule(view, queue, fit);
      before.Add(Ms(start));
    }

    start = absl::Now();
    const std::vector<Placement>& p = inc.Schedule();
    const double pass_ms = Ms(start);
    if (turn == 0) {
      first_pass_ms = pass_ms;
      first_placed = p.size();
    } else {
      after.Add(pass_ms);
    }
    visited = inc.last_pass_visited();
    placed = p.size();
    if (turn % 5 == 0) {
      start = absl::Now();
      Decision all = inc.ToDecision();
      materialize_ms = Ms(start);
      same = same && SameDecision(all, d);
      ++compared;
    } else {
      same = same && SamePlacements(p, d.placements);
    }
    last = d.placements;
    // The full recomputation's garbage (its inputs and ~100,000 reason strings) would
    // otherwise be consolidated by malloc inside the next turn's timed changes.
    d = Decision();
    malloc_trim(0);
  }
  std::printf(
      "| scheduling pass, %s%s | %d agents x 8 slots, %zu pending | before (full recomputation): "
      "%.2f ms median, %.2f ms max; after (incremental): %.3f ms median, %.3f ms max | "
      "same decisions: %s (%d whole decisions compared); last pass: %zu placed, %zu requests "
      "visited; incremental: first pass %.2f ms (%zu placed), loading the state %.0f ms, a "
      "turn's changes %.3f ms median, every reason formatted %.0f ms |\n",
      fit_name,
      mix == Mix::kAll ? "" : mix == Mix::kPlaceable ? ", no 12-slot trials" : ", no 12-slot trials, all at priority 42",
      num_agents, order.size(), before.Median(), before.Max(), after.Median(), after.Max(),
      same ? "yes" : "NO", compared, placed, visited, first_pass_ms, first_placed, load_ms,
      changes.Median(), materialize_ms);
}

}  // namespace
}  // namespace det::master::scheduler

int main() {
  using det::master::scheduler::Bench;
  using det::master::scheduler::Fit;
  using det::master::scheduler::Mix;
  Bench(Fit::kBestFit, "best fit", 1000, 10000, Mix::kAll);
  Bench(Fit::kWorstFit, "worst fit", 1000, 10000, Mix::kAll);
  Bench(Fit::kBestFit, "best fit", 10000, 100000, Mix::kAll);
  Bench(Fit::kWorstFit, "worst fit", 10000, 100000, Mix::kAll);
  Bench(Fit::kBestFit, "best fit", 10000, 100000, Mix::kPlaceable);
  Bench(Fit::kBestFit, "best fit", 10000, 100000, Mix::kOnePriority);
  return 0;
}
