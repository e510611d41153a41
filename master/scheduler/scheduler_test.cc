#include "master/scheduler/scheduler.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/scheduler/scheduler_testing.h"

namespace det::master::scheduler {
namespace {

using ::testing::HasSubstr;

using fixtures::Agent;
using fixtures::Req;

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
        Case{"ExactFitPreferred", {Agent("a", 8, 0), Agent("b", 8, 5), Agent("c", 8, 4)},
             {Req("t", 3)}, Fit::kBestFit, {{"t", "b:5,6,7"}}},
        Case{"SixteenOnTwoIdleEightSlotAgents", {Agent("a", 8), Agent("b", 8)}, {Req("t", 16)},
             Fit::kBestFit, {{"t", "a:0,1,2,3,4,5,6,7;b:0,1,2,3,4,5,6,7"}}},
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
        Case{"AWaitingReasonNamesTheBlockerByItsLabel", {Agent("a", 4, 2)},
             {[] { auto r = Req("27", 4, 10, 1); r.label = "trial 27 of experiment 5"; return r; }(),
              Req("low", 1, 50, 2)},
             Fit::kBestFit,
             {{"27", "waiting"}, {"low", "waiting: waiting behind trial 27 of experiment 5 (priority 10)"}}},
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
             {{"gc", "a:"}}},
        Case{"ZeroSlotRequestsAreNotHeldBackByAMoreImportantWaitingOne",
             {Agent("a", 4, 2), Agent("b", 4, 3)},
             {Req("big", 4, 10, 1), Req("gc", 0, 50, 2), Req("low", 1, 50, 3)}, Fit::kBestFit,
             {{"big", "waiting: needs 4 free slots"}, {"gc", "a:"},
              {"low", "waiting: waiting behind big (priority 10)"}}},
        Case{"AWaitingZeroSlotRequestHoldsNothingBack",
             {Agent("a", 2, 0, "other")}, {Req("gc", 0, 1, 1), Req("t", 1, 50, 2)},
             Fit::kBestFit, {{"gc", "waiting: no agents in resource pool 'default'"},
                             {"t", "waiting: no agents in resource pool 'default'"}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A request of experiment job `group` limited to `max_slots` (resources.max_slots).
Request Capped(const std::string& id, int slots, const std::string& group, int max_slots,
               int priority = 42, int64_t seq = 0) {
  Request r = Req(id, slots, priority, seq);
  r.group = group;
  r.group_max_slots = max_slots;
  return r;
}

struct MaxSlotsCase {
  std::string name;
  std::vector<AgentView> agents;
  std::vector<Request> queue;
  std::map<std::string, int> group_used;  // slots the groups' running allocations hold
  std::map<std::string, std::string> expect;
  std::set<std::string> capped;
};

class MaxSlotsTable : public ::testing::TestWithParam<MaxSlotsCase> {};

TEST_P(MaxSlotsTable, HonoursResourcesMaxSlots) {
  const MaxSlotsCase& c = GetParam();
  Decision d = Schedule(c.agents, c.queue, Fit::kBestFit, c.group_used);
  for (const auto& [id, want] : c.expect) {
    SCOPED_TRACE(id);
    EXPECT_THAT(Where(d, id), HasSubstr(want));
  }
  EXPECT_EQ(d.capped, c.capped);
}

INSTANTIATE_TEST_SUITE_P(
    Policy, MaxSlotsTable,
    ::testing::Values(
        MaxSlotsCase{"OneTrialAtATimeWithMaxSlotsOne",
                     {Agent("a", 4)},
                     {Capped("t1", 1, "exp-1", 1, 42, 1), Capped("t2", 1, "exp-1", 1, 42, 2)},
                     {},
                     {{"t1", "a:0"},
                      {"t2",
                       "waiting: max_slots 1 of its experiment reached (1 slot in use, "
                       "needs 1 more)"}},
                     {"t2"}},
        MaxSlotsCase{"RunningAllocationsCount",
                     {Agent("a", 4, 2)},
                     {Capped("t3", 2, "exp-1", 3, 42, 3)},
                     {{"exp-1", 2}},
                     {{"t3", "waiting: max_slots 3 of its experiment reached (2 slots in use"}},
                     {"t3"}},
        MaxSlotsCase{"UpToTheLimit",
                     {Agent("a", 8)},
                     {Capped("t1", 2, "exp-1", 4, 42, 1), Capped("t2", 2, "exp-1", 4, 42, 2),
                      Capped("t3", 2, "exp-1", 4, 42, 3)},
                     {},
                     {{"t1", "a:0,1"}, {"t2", "a:2,3"}, {"t3", "waiting: max_slots 4"}},
                     {"t3"}},
        MaxSlotsCase{"ZeroIsUnlimited",
                     {Agent("a", 4)},
                     {Capped("t1", 2, "exp-1", 0, 42, 1), Capped("t2", 2, "exp-1", 0, 42, 2)},
                     {{"exp-1", 100}},
                     {{"t1", "a:0,1"}, {"t2", "a:2,3"}},
                     {}},
        MaxSlotsCase{"ACappedRequestHoldsNothingBack",
                     {Agent("a", 2)},
                     {Capped("urgent", 1, "exp-1", 1, 1, 1), Req("low", 1, 90, 2)},
                     {{"exp-1", 1}},
                     {{"urgent", "waiting: max_slots 1"}, {"low", "a:0"}},
                     {"urgent"}},
        MaxSlotsCase{"GroupsAreSeparate",
                     {Agent("a", 4)},
                     {Capped("t1", 1, "exp-1", 1, 42, 1), Capped("t2", 1, "exp-2", 1, 42, 2),
                      Capped("t3", 1, "exp-1", 1, 42, 3)},
                     {},
                     {{"t1", "a:0"}, {"t2", "a:1"}, {"t3", "waiting: max_slots 1"}},
                     {"t3"}}),
    [](const ::testing::TestParamInfo<MaxSlotsCase>& info) { return info.param.name; });

Running Holding(const std::string& id, int priority, int64_t seq, const std::string& agent,
            std::vector<std::string> slots) {
  Running r;
  r.id = id;
  r.priority = priority;
  r.seq = seq;
  r.agents.push_back({agent, std::move(slots)});
  return r;
}

// Agent `id` of `size` slots with `used` slots held by running allocations.
TEST(Preemption, PicksTheLeastImportantMostRecentlyQueued) {
  // One 4-slot agent fully used by three lower-priority runs; an urgent 2-slot request.
  AgentView a = Agent("a", 4, 4);
  std::vector<Running> running = {Holding("old-low", 60, 1, "a", {"0", "1"}),
                                  Holding("new-low", 60, 5, "a", {"2"}),
                                  Holding("mid", 50, 9, "a", {"3"})};
  std::vector<Request> queue = {Req("urgent", 2, 10, 10)};
  Decision d = Schedule({a}, queue, Fit::kBestFit);
  ASSERT_EQ(d.waiting.count("urgent"), 1u);
  auto victims = SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {"default"});
  // new-low (priority 60, latest) first; then old-low frees 2 more, enough. new-low alone
  // frees 1 slot, too few; the minimal set with the least important runs is {old-low}.
  EXPECT_EQ(victims.size(), 1u);
  EXPECT_EQ(victims.count("old-low"), 1u);
  EXPECT_EQ(victims["old-low"], "urgent");
}

TEST(Preemption, OnlyLessImportantRunsAndOnlyInPreemptiblePools) {
  AgentView a = Agent("a", 2, 2);
  std::vector<Running> running = {Holding("same", 42, 1, "a", {"0", "1"})};
  std::vector<Request> queue = {Req("waiting", 2, 42, 2)};
  Decision d = Schedule({a}, queue, Fit::kBestFit);
  EXPECT_TRUE(SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {"default"}).empty());
  queue[0].priority = 1;
  d = Schedule({a}, queue, Fit::kBestFit);
  EXPECT_TRUE(SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {}).empty());
  EXPECT_EQ(SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {"default"}).size(), 1u);
}

TEST(Preemption, NoVictimsWhenEvenAllWouldNotSuffice) {
  AgentView a = Agent("a", 4, 1);
  std::vector<Running> running = {Holding("low", 90, 1, "a", {"0"})};
  std::vector<Request> queue = {Req("huge", 12, 1, 2)};  // Never fits 4-slot agents.
  Decision d = Schedule({a}, queue, Fit::kBestFit);
  EXPECT_TRUE(SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {"default"}).empty());
}

TEST(Schedule, LargeClusterPlacesEverythingThatFits) {
  std::vector<AgentView> agents;
  for (int i = 0; i < 100; ++i) agents.push_back(Agent(absl::StrCat("n", 1000 + i), 8));
  std::vector<Request> queue;
  for (int i = 0; i < 400; ++i) queue.push_back(Req(absl::StrCat("t", i), 2, 42, i));
  Decision d = Schedule(agents, queue, Fit::kBestFit);
  EXPECT_EQ(d.placements.size(), 400u);  // 100 agents x 8 slots / 2.
  // Best fit packs agents before opening new ones: every agent is exactly full.
  std::map<std::string, int> used;
  for (const auto& p : d.placements) used[p.agents[0].agent_id] += 2;
  for (const auto& [agent, n] : used) EXPECT_EQ(n, 8) << agent;
}

TEST(Preemption, NoVictimsForARequestHeldBackByMaxSlots) {
  AgentView a = Agent("a", 2, 2);
  std::vector<Running> running = {Holding("low", 90, 1, "a", {"0", "1"})};
  std::vector<Request> queue = {Capped("capped", 1, "exp-1", 1, 1, 2)};
  Decision d = Schedule({a}, queue, Fit::kBestFit, {{"exp-1", 1}});
  ASSERT_EQ(d.capped.count("capped"), 1u);
  EXPECT_TRUE(SelectPreemptions({a}, queue, running, d, Fit::kBestFit, {"default"}).empty());
}

}  // namespace
}  // namespace det::master::scheduler
