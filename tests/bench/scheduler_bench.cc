// Time of one scheduling pass: 1,000 agents x 8 slots (a third partly busy) and 10,000
// pending trials of mixed sizes (1, 2, 4, 8, 16, 12) and priorities. Prints one line per
// fit policy with the median and worst of several passes.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "master/scheduler/scheduler.h"

namespace det::master::scheduler {
namespace {

void Bench(Fit fit, const char* name) {
  std::mt19937_64 rng(42);
  std::vector<AgentView> agents;
  for (int i = 0; i < 1000; ++i) {
    AgentView a;
    a.id = absl::StrCat("agent-", i);
    a.pool = "default";
    a.num_slots = 8;
    int used = i % 3 == 0 ? static_cast<int>(rng() % 8) : 0;
    for (int s = used; s < 8; ++s) a.free_slots.push_back(absl::StrCat(s));
    agents.push_back(std::move(a));
  }
  const int sizes[] = {1, 1, 1, 2, 2, 4, 8, 16, 12};
  std::vector<Request> queue;
  for (int i = 0; i < 10000; ++i) {
    Request r;
    r.id = absl::StrCat(i);
    r.slots = sizes[rng() % 9];
    r.priority = 1 + static_cast<int>(rng() % 99);
    r.seq = i;
    queue.push_back(std::move(r));
  }
  std::vector<double> ms;
  size_t placed = 0;
  for (int run = 0; run < 9; ++run) {
    absl::Time start = absl::Now();
    Decision d = Schedule(agents, queue, fit);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    placed = d.placements.size();
  }
  std::sort(ms.begin(), ms.end());
  std::printf("| scheduling pass, %s | 1000 agents x 8 slots, 10000 pending | %.2f ms median, %.2f ms max | %zu placed |\n",
              name, ms[ms.size() / 2], ms.back(), placed);
}

}  // namespace
}  // namespace det::master::scheduler

int main() {
  det::master::scheduler::Bench(det::master::scheduler::Fit::kBestFit, "best fit");
  det::master::scheduler::Bench(det::master::scheduler::Fit::kWorstFit, "worst fit");
  return 0;
}
