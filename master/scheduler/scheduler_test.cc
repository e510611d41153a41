#include "master/scheduler/scheduler.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master::scheduler {
namespace {

using ::testing::HasSubstr;

// An agent `id` with `size` slots of which the first `used` are taken.
AgentView Agent(const std::string& id, int size, int used = 0, std::string pool = "default") {
  AgentView a;
  a.id = id;
  a.pool = pool;
  a.num_slots = size;
  for (int i = used; i < size; ++i) a.free_slots.push_back(absl::StrCat(i));
  return a;
}

Request Req(const std::string& id, int slots, int priority = 42, int64_t seq = 0) {
  Request r;
  r.id = id;
  r.slots = slots;
  r.priority = priority;
  r.seq = seq;
  return r;
}

// "agent:slot,slot;agent:..." for one placement.
std::string Where(const Decision& d, const std::string& id) {
  for (const auto& p : d.placements) {
    if (p.request_id != id) continue;
    std::vector<std::string> parts;
    for (const auto& a : p.agents) parts.push_back(a.agent_id + ":" + absl::StrJoin(a.slots, ","));
    return absl::StrJoin(parts, ";");
  }
  auto it = d.waiting.find(id);
  return it == d.waiting.end() ? "?" : "waiting: " + it->second;
}

struct Case {
  std::string name;
  std::vector<AgentView> agents;
  std::vector<Request> queue;
  Fit fit;
  std::map<std::string, std::string> expect;  // request -> Where() or a substring of the reason
};

class ScheduleTable : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleTable, PlacesAsExpected) {
  const Case& c = GetParam();
  Decision d = Schedule(c.agents, c.queue, c.fit);
  for (const auto& [id, want] : c.expect) {
    SCOPED_TRACE(id);
    EXPECT_THAT(Where(d, id), HasSubstr(want));
  }
  EXPECT_EQ(d.placements.size() + d.waiting.size(), c.queue.size());
}

INSTANTIATE_TEST_SUITE_P(
    Policy, ScheduleTable,
    ::testing::Values(
        Case{"BestFitPicksFullestAgentThatFits",
             {Agent("a", 8, 2), Agent("b", 8, 5), Agent("c", 8, 7)},
             {Req("t", 2)}, Fit::kBestFit, {{"t", "b:5,6"}}},
        Case{"WorstFitPicksEmptiest",
             {Agent("a", 8, 2), Agent("b", 8, 5), Agent("c", 8, 0)},
             {Req("t", 2)}, Fit::kWorstFit, {{"t", "c:0,1"}}},
        Case{"TiesBrokenById", {Agent("b", 4), Agent("a", 4)}, {Req("t", 1)}, Fit::kBestFit,
             {{"t", "a:0"}}},
        Case{"SmallTrialsShareAnAgent", {Agent("a", 4)},
             {Req("t1", 2, 42, 1), Req("t2", 2, 42, 2), Req("t3", 1, 42, 3)}, Fit::kBestFit,
             {{"t1", "a:0,1"}, {"t2", "a:2,3"}, {"t3", "waiting: needs 1 free slot on one agent"}}},
        Case{"MultiAgentTakesWholeIdleAgentsChiefFirst",
             {Agent("n2", 8), Agent("n1", 8), Agent("n3", 8, 1)}, {Req("big", 16)}, Fit::kBestFit,
             {{"big", "n1:0,1,2,3,4,5,6,7;n2:0,1,2,3,4,5,6,7"}}},
        Case{"MultiAgentNeedsAMultipleOfTheAgentSize", {Agent("a", 8), Agent("b", 8)},
             {Req("t", 12)}, Fit::kBestFit,
             {{"t", "12 slots requested; agents in resource pool 'default' have 8 slots; a "
                    "multi-agent trial must use a multiple of that"}}},
        Case{"MultiAgentWaitsForIdleAgents", {Agent("a", 4), Agent("b", 4, 1)}, {Req("t", 8)},
             Fit::kBestFit, {{"t", "needs 2 idle 4-slot agents in resource pool 'default'; 1 of 2 are idle"}}},
        Case{"MixedSizesUseTheLargestGroupThatFits",
             {Agent("s1", 2), Agent("s2", 2), Agent("l1", 4), Agent("l2", 4)}, {Req("t", 8)},
             Fit::kBestFit, {{"t", "l1:0,1,2,3;l2:0,1,2,3"}}},
        Case{"BigJobDoesNotBlockSmallerOfSamePriority", {Agent("a", 4, 2)},
             {Req("big", 4, 42, 1), Req("small", 2, 42, 2)}, Fit::kBestFit,
             {{"big", "waiting: needs 4 free slots"}, {"small", "a:2,3"}}},
        Case{"LowerPriorityDoesNotJumpAhead", {Agent("a", 4, 2)},
             {Req("big", 4, 10, 1), Req("low", 1, 50, 2)}, Fit::kBestFit,
             {{"big", "waiting"}, {"low", "waiting: waiting behind big (priority 10)"}}},
        Case{"PriorityBeatsSubmissionOrder", {Agent("a", 1)},
             {Req("early", 1, 50, 1), Req("urgent", 1, 5, 2)}, Fit::kBestFit,
             {{"urgent", "a:0"}, {"early", "waiting"}}},
        Case{"EmptyPool", {}, {Req("t", 1)}, Fit::kBestFit,
             {{"t", "no agents in resource pool 'default'"}}},
        Case{"DisabledAgentsOfferNothing",
             {[] { auto a = Agent("a", 4); a.enabled = false; return a; }()}, {Req("t", 1)},
             Fit::kBestFit, {{"t", "all 1 agent in resource pool 'default' are disabled"}}},
        Case{"OtherPoolsAreNotUsed", {Agent("gpu", 8, 0, "gpus")}, {Req("t", 1)}, Fit::kBestFit,
             {{"t", "no agents in resource pool 'default'"}}},
        Case{"ZeroSlotRequestsNeedNoFreeSlot", {Agent("a", 1, 1)}, {Req("gc", 0)}, Fit::kBestFit,
             {{"gc", "a:"}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace det::master::scheduler
