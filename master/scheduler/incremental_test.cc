// IncrementalScheduler against Schedule() (the full recomputation) on seeded, randomized
// sequences of changes: after every change both must place the same requests on the same
// slots, in the same order, and give every waiting request the same reason.
#include "master/scheduler/incremental.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/scheduler/scheduler.h"
#include "master/scheduler/scheduler_testing.h"

// Counts this binary's allocations while counting_allocations is set (a pass that must
// allocate nothing, below).
namespace {
std::atomic<bool> counting_allocations{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (counting_allocations.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace det::master::scheduler {
namespace {

// "id@agent:slot,slot;agent:...|id@..." for comparing placements with readable diffs.
std::string Describe(const std::vector<Placement>& placements) {
  std::vector<std::string> out;
  for (const auto& p : placements) {
    std::vector<std::string> parts;
    for (const auto& a : p.agents) parts.push_back(a.agent_id + ":" + absl::StrJoin(a.slots, ","));
    out.push_back(p.request_id + "@" + absl::StrJoin(parts, ";"));
  }
  return absl::StrJoin(out, "|");
}

// The same state twice: as plain containers for Schedule(), and in an IncrementalScheduler
// fed every change as it happens.
class Twin {
 public:
  Twin(uint64_t seed, Fit fit) : rng_(seed), fit_(fit), inc_(fit) {}

  void Step() {
    switch (Pick(12)) {
      case 0:
      case 1:
        AddAgent();
        break;
      case 2:
        if (!agents_.empty()) {
          std::string id = RandomKey(agents_);
          agents_.erase(id);
          inc_.RemoveAgent(id);
        }
        break;
      case 3:  // Slots freed or taken outside the scheduler.
        if (!agents_.empty()) {
          AgentView& a = agents_[RandomKey(agents_)];
          a.free_slots = RandomFree(a.num_slots);
          inc_.SetAgent(a);
        }
        break;
      case 4:
        if (!agents_.empty()) {
          AgentView& a = agents_[RandomKey(agents_)];
          a.enabled = !a.enabled;
          inc_.SetAgent(a);
        }
        break;
      case 5:
      case 6:
      case 7:
        AddRequest(absl::StrCat(Pick(2) ? "r" : "gc-", next_++));
        break;
      case 8:
        if (!requests_.empty()) {
          std::string id = RandomKey(requests_);
          requests_.erase(id);
          order_.erase(std::find(order_.begin(), order_.end(), id));
          inc_.RemoveRequest(id);
          reasons_.erase(id);
        }
        break;
      case 9:  // Priority (or size, or pool) changed.
        if (!requests_.empty()) {
          Request& r = requests_[RandomKey(requests_)];
          switch (Pick(3)) {
            case 0: r.priority = RandomPriority(); break;
            case 1: r.slots = RandomSlots(); break;
            default: r.pool = RandomPool(); break;
          }
          inc_.SetRequest(r);
        }
        break;
      case 10: {
        std::string group = absl::StrCat("exp-", Pick(3));
        int slots = Pick(3) == 0 ? 0 : Pick(10);
        if (slots == 0) {
          group_used_.erase(group);
        } else {
          group_used_[group] = slots;
        }
        inc_.SetGroupUsed(group, slots);
        break;
      }
      default:
        StartLastPass();
        break;
    }
  }

  // Runs both and compares everything they decide.
  void Compare(const std::string& where) {
    SCOPED_TRACE(where);
    std::vector<AgentView> agents;
    for (const auto& [id, a] : agents_) agents.push_back(a);
    std::shuffle(agents.begin(), agents.end(), rng_);  // Agent order must not matter.
    std::vector<Request> queue;
    for (const auto& id : order_) queue.push_back(requests_.at(id));
    Decision want = Schedule(agents, queue, fit_, group_used_);
    const std::vector<Placement>& got = inc_.Schedule();
    ASSERT_EQ(Describe(got), Describe(want.placements));
    Decision all = inc_.ToDecision();
    ASSERT_EQ(all.waiting, want.waiting);
    ASSERT_EQ(all.capped, want.capped);
    for (const auto& [id, why] : want.waiting) {
      ASSERT_EQ(inc_.WaitingReason(id), why) << id;
      ASSERT_EQ(inc_.Capped(id), want.capped.count(id) == 1) << id;
    }
    for (const auto& p : want.placements) ASSERT_EQ(inc_.WaitingReason(p.request_id), "");
    // The reasons that changed, kept as the master keeps them: only a changed reason is
    // passed, a request behind its pool's blocker shares the pool's text, and the record
    // then shows every waiting request's reason.
    if (Pick(10) == 0) {
      inc_.ReportAllReasons();
      reasons_.clear();
      pool_reasons_.clear();
    }
    bool behind_passed = false;
    IncrementalScheduler::ReasonSink sink;
    sink.changed = [&](const std::string& id, const std::string& why) {
      auto it = reasons_.find(id);
      EXPECT_TRUE(it == reasons_.end() || !it->second.pool.empty() || it->second.own != why)
          << id << " passed unchanged: " << why;
      reasons_[id] = {why, ""};
    };
    sink.behind = [&](const std::string& id, const std::string& pool) {
      behind_passed = true;
      auto it = reasons_.find(id);
      EXPECT_TRUE(it == reasons_.end() || it->second.pool != pool) << id << " passed behind again";
      EXPECT_TRUE(pool_reasons_.count(pool)) << id << " behind " << pool << ", which has no text";
      reasons_[id] = {"", pool};
    };
    sink.behind_reason = [&](const std::string& pool, const std::string& why) {
      EXPECT_FALSE(behind_passed) << "the text of " << pool << " after a request behind it";
      auto it = pool_reasons_.find(pool);
      EXPECT_TRUE(it == pool_reasons_.end() || it->second != why) << pool << " passed unchanged";
      pool_reasons_[pool] = why;
    };
    inc_.ChangedReasons(sink);
    for (const auto& p : want.placements) reasons_.erase(p.request_id);
    for (const auto& [id, why] : want.waiting) {
      ASSERT_EQ(Shown(id), why) << id;
    }
    // A second pass with nothing changed is the same pass, and changes no reason.
    ASSERT_EQ(Describe(inc_.Schedule()), Describe(want.placements));
    IncrementalScheduler::ReasonSink none;
    none.changed = [&](const std::string& id, const std::string& why) {
      ADD_FAILURE() << id << " passed again with nothing changed: " << why;
    };
    none.behind = [&](const std::string& id, const std::string& pool) {
      ADD_FAILURE() << id << " passed behind " << pool << " again with nothing changed";
    };
    none.behind_reason = [&](const std::string& pool, const std::string& why) {
      ADD_FAILURE() << pool << "'s text passed again with nothing changed: " << why;
    };
    inc_.ChangedReasons(none);
    // A caller that lost a record gets the same one back.
    if (!want.waiting.empty()) {
      const std::string id = RandomKey(want.waiting);
      Record before = reasons_.at(id);
      reasons_.erase(id);
      inc_.PassReason(id, sink);
      ASSERT_EQ(reasons_.at(id).own, before.own) << id;
      ASSERT_EQ(reasons_.at(id).pool, before.pool) << id;
    }
    last_ = want.placements;
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % n); }
  template <typename M>
  std::string RandomKey(const M& m) {
    auto it = m.begin();
    std::advance(it, Pick(static_cast<int>(m.size())));
    return it->first;
  }
  std::string RandomPool() {
    static const char* kPools[] = {"default", "default", "default", "gpu", "empty"};
    return kPools[Pick(5)];
  }
  int RandomPriority() {
    static const int kPriorities[] = {1, 10, 42, 42, 42, 50, 99};
    return kPriorities[Pick(7)];
  }
  int RandomSlots() {
    static const int kSlots[] = {0, 1, 1, 1, 2, 2, 3, 4, 8, 12, 16, 24};
    return kSlots[Pick(12)];
  }
  std::vector<std::string> RandomFree(int size) {
    std::vector<std::string> free;
    const int mode = Pick(3);  // Idle, full, or some of each.
    for (int s = 0; s < size; ++s) {
      if (mode == 0 || (mode == 2 && Pick(2))) free.push_back(absl::StrCat(s));
    }
    return free;
  }

  void AddAgent() {
    static const int kSizes[] = {0, 1, 2, 4, 4, 8, 8, 8};
    AgentView a;
    a.id = absl::StrCat("agent-", Pick(60));  // Reuses ids: a rejoining agent.
    a.pool = Pick(4) == 0 ? "gpu" : "default";
    a.num_slots = kSizes[Pick(8)];
    a.free_slots = RandomFree(a.num_slots);
    a.enabled = Pick(10) != 0;
    agents_[a.id] = a;
    inc_.SetAgent(a);
  }

  void AddRequest(const std::string& id) {
    Request r;
    r.id = id;
    r.slots = RandomSlots();
    r.priority = RandomPriority();
    r.seq = Pick(40);  // Ties on (priority, seq) are broken by arrival.
    r.pool = RandomPool();
    if (Pick(2)) {
      r.group = absl::StrCat("exp-", Pick(3));
      static const int kMax[] = {0, 2, 4, 8, 16};
      r.group_max_slots = kMax[Pick(5)];
    }
    requests_[id] = r;
    order_.push_back(id);
    inc_.SetRequest(r);
  }

  // What the master does with a pass's placements: the slots become used and the requests
  // leave the queue.
  void StartLastPass() {
    for (const auto& p : last_) {
      if (!requests_.count(p.request_id)) continue;
      bool present = true;
      for (const auto& share : p.agents) present = present && agents_.count(share.agent_id);
      if (!present) continue;
      for (const auto& share : p.agents) {
        AgentView& a = agents_[share.agent_id];
        for (const auto& slot : share.slots) {
          a.free_slots.erase(std::remove(a.free_slots.begin(), a.free_slots.end(), slot),
                             a.free_slots.end());
        }
        inc_.SetAgent(a);
      }
      requests_.erase(p.request_id);
      order_.erase(std::find(order_.begin(), order_.end(), p.request_id));
      inc_.RemoveRequest(p.request_id);
      reasons_.erase(p.request_id);
    }
    last_.clear();
  }

  std::mt19937_64 rng_;
  Fit fit_;
  IncrementalScheduler inc_;
  std::map<std::string, AgentView> agents_;
  std::map<std::string, Request> requests_;
  std::vector<std::string> order_;  // Request ids in the order they were first set.
  std::map<std::string, int> group_used_;
  std::vector<Placement> last_;
  // As ChangedReasons passed them: a reason of its own, or its pool's.
  struct Record {
    std::string own, pool;
  };
  std::map<std::string, Record> reasons_;
  std::map<std::string, std::string> pool_reasons_;  // pool -> the text behind its blocker
  // What a reader of the record sees for `id` ("<none>" when never passed).
  std::string Shown(const std::string& id) const {
    auto it = reasons_.find(id);
    if (it == reasons_.end()) return "<none>";
    if (it->second.pool.empty()) return it->second.own;
    auto p = pool_reasons_.find(it->second.pool);
    return p == pool_reasons_.end() ? "<no text for pool " + it->second.pool + ">" : p->second;
  }
  int next_ = 0;
};

class Randomized : public ::testing::TestWithParam<std::tuple<int, Fit>> {};

TEST_P(Randomized, SameAsAFullRecomputationAfterEveryChange) {
  const auto [seed, fit] = GetParam();
  Twin twin(seed, fit);
  for (int step = 0; step < 400; ++step) {
    twin.Step();
    if (step % 2 == 0) twin.Compare(absl::StrCat("seed ", seed, " step ", step));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, Randomized,
                         ::testing::Combine(::testing::Range(1, 41),
                                            ::testing::Values(Fit::kBestFit, Fit::kWorstFit)));

using fixtures::Agent;
using fixtures::Req;

TEST(IncrementalScheduler, VisitsOnlyWhatABlockerDoesNotHoldBack) {
  IncrementalScheduler s(Fit::kBestFit);
  s.SetAgent(Agent("a", 4, 2));
  s.SetRequest(Req("big", 4, 10, 1));
  for (int i = 0; i < 1000; ++i) s.SetRequest(Req(absl::StrCat("low-", i), 1, 50, 2 + i));
  s.SetRequest(Req("gc", 0, 60, 5000));
  EXPECT_TRUE(s.Schedule().size() == 1u && s.Schedule()[0].request_id == "gc");
  EXPECT_EQ(s.last_pass_visited(), 2u);  // big, then gc; the 1,000 wait behind big.
  EXPECT_EQ(s.WaitingReason("low-999"), "waiting behind big (priority 10)");
  EXPECT_THAT(s.WaitingReason("big"), ::testing::HasSubstr("needs 4 free slots on one agent"));
  EXPECT_EQ(s.ToDecision().waiting.size(), 1001u);
}

TEST(IncrementalScheduler, AWaitingReasonNamesTheBlockerByItsLabel) {
  IncrementalScheduler s(Fit::kBestFit);
  s.SetAgent(Agent("a", 4, 2));
  auto big = Req("27", 4, 10, 1);
  big.label = "trial 27 of experiment 5";
  s.SetRequest(big);
  s.SetRequest(Req("low", 1, 50, 2));
  s.Schedule();
  EXPECT_EQ(s.WaitingReason("low"), "waiting behind trial 27 of experiment 5 (priority 10)");
}

// The case ChangedReasons is built for: a freed agent moves the blocker of many requests.
// Their reasons change by one text (the pool's), not one per request, and every request
// then reads the new reason.
TEST(IncrementalScheduler, AFreedAgentThatMovesTheBlockerChangesOneTextForEveryRequestBehind) {
  IncrementalScheduler s(Fit::kBestFit);
  s.SetAgent(Agent("a", 4, 4));  // Busy.
  s.SetAgent(Agent("b", 4, 4));
  s.SetRequest(Req("big1", 4, 10, 1));
  s.SetRequest(Req("big2", 4, 20, 2));
  constexpr int kBehind = 10000;
  for (int i = 0; i < kBehind; ++i) s.SetRequest(Req(absl::StrCat("low-", i), 1, 50, 3 + i));
  ASSERT_TRUE(s.Schedule().empty());

  std::map<std::string, std::string> own, pool_of, pool_text;  // The caller's record.
  int passed = 0;
  IncrementalScheduler::ReasonSink sink;
  sink.changed = [&](const std::string& id, const std::string& why) {
    ++passed;
    own[id] = why;
    pool_of.erase(id);
  };
  sink.behind = [&](const std::string& id, const std::string& pool) {
    ++passed;
    pool_of[id] = pool;
    own.erase(id);
  };
  sink.behind_reason = [&](const std::string& pool, const std::string& why) {
    pool_text[pool] = why;
  };
  auto shown = [&](const std::string& id) {
    auto p = pool_of.find(id);
    return p != pool_of.end() ? pool_text.at(p->second) : own.at(id);
  };
  s.ChangedReasons(sink);
  EXPECT_EQ(passed, kBehind + 2);  // The first report passes every request.
  EXPECT_EQ(shown("low-0"), "waiting behind big1 (priority 10)");
  EXPECT_EQ(shown("big2"), "waiting behind big1 (priority 10)");

  // Agent a's trial ends: big1 is placed there, big2 now holds back the 10,000.
  s.SetAgent(Agent("a", 4, 0));
  ASSERT_EQ(s.Schedule().size(), 1u);
  EXPECT_EQ(s.Schedule()[0].request_id, "big1");
  passed = 0;
  s.ChangedReasons(sink);
  EXPECT_LE(passed, 2);  // big2 (a reason of its own now); none of the 10,000.
  EXPECT_EQ(pool_text.at("default"), "waiting behind big2 (priority 20)");
  EXPECT_EQ(shown("big2"), s.WaitingReason("big2"));
  EXPECT_THAT(shown("big2"), ::testing::HasSubstr("needs 4 free slots on one agent"));
  for (int i = 0; i < kBehind; ++i) {
    const std::string id = absl::StrCat("low-", i);
    ASSERT_EQ(shown(id), "waiting behind big2 (priority 20)") << id;
    ASSERT_EQ(shown(id), s.WaitingReason(id)) << id;
  }
}

TEST(IncrementalScheduler, KeepsEachRequestsTagAndGivesItToTheLabeler) {
  IncrementalScheduler s(Fit::kBestFit);
  s.SetLabeler([](const Request& r, uint64_t tag) {
    return absl::StrCat("request ", r.id, " tagged ", tag, " of group ", r.group);
  });
  s.SetAgent(Agent("a", 4, 2));
  auto big = Req("big", 4, 10, 1);
  big.group = "exp-3";
  s.SetRequest(big, 77);
  s.SetRequest(Req("low", 1, 50, 2), 78);
  EXPECT_EQ(s.Tag("big"), 77u);
  EXPECT_EQ(s.Tag("low"), 78u);
  EXPECT_EQ(s.Tag("unknown"), 0u);
  s.Schedule();
  EXPECT_EQ(s.WaitingReason("low"), "waiting behind request big tagged 77 of group exp-3 (priority 10)");
  // Set again with another tag: the new one.
  s.SetRequest(big, 79);
  EXPECT_EQ(s.Tag("big"), 79u);
  s.RemoveRequest("big");
  EXPECT_EQ(s.Tag("big"), 0u);
}

// Each pass reuses the buffers of the last (placements, the merge's streams, the pool's
// snapshots, the groups' placements, a reason's text): once they have grown, a pass and its
// changed reasons allocate nothing (a malloc inside a pass can take milliseconds when the
// process has freed much since).
TEST(IncrementalScheduler, APassAndItsChangedReasonsAllocateNothingOnceWarm) {
  IncrementalScheduler s(Fit::kBestFit);
  for (int i = 0; i < 20; ++i) s.SetAgent(Agent(absl::StrCat("agent-", i), 8, i % 8));
  s.SetAgent(Agent("pair-0", 4, 4, "multi"));
  s.SetAgent(Agent("pair-1", 4, 4, "multi"));
  for (int i = 0; i < 200; ++i) {
    auto r = Req(absl::StrCat("t", i), i % 3 == 0 ? 8 : 2, 10 + i % 5, i);
    r.group = absl::StrCat("exp-", i % 4);
    r.group_max_slots = 24;
    s.SetRequest(r);
  }
  auto multi = Req("m", 8, 10, 1000);
  multi.pool = "multi";
  s.SetRequest(multi);
  IncrementalScheduler::ReasonSink sink;
  sink.changed = [](const std::string&, const std::string&) {};
  sink.behind = [](const std::string&, const std::string&) {};
  sink.behind_reason = [](const std::string&, const std::string&) {};
  // Each round: the same agents' slots freed and taken back, so every pass places again.
  auto round = [&](int round, bool count) {
    const int used = round % 2 == 0 ? 0 : 3;
    for (int i = 0; i < 4; ++i) s.SetAgent(Agent(absl::StrCat("agent-", i), 8, used));
    s.SetAgent(Agent("pair-0", 4, round % 2 == 0 ? 0 : 4, "multi"));
    s.SetAgent(Agent("pair-1", 4, round % 2 == 0 ? 0 : 4, "multi"));
    s.SetGroupUsed("exp-1", round % 2 == 0 ? 0 : 8);
    allocations = 0;
    counting_allocations = count;
    const size_t placed = s.Schedule().size();
    s.ChangedReasons(sink);
    counting_allocations = false;
    return placed;
  };
  for (int r = 0; r < 6; ++r) round(r, false);
  for (int r = 6; r < 10; ++r) {
    EXPECT_GT(round(r, true), 0u) << "round " << r;
    EXPECT_EQ(allocations.load(), 0) << "round " << r;
  }
}

TEST(IncrementalScheduler, APassLeavesTheClusterAsItWas) {
  IncrementalScheduler s(Fit::kBestFit);
  s.SetAgent(Agent("a", 2));
  s.SetRequest(Req("t1", 2, 42, 1));
  ASSERT_EQ(s.Schedule().size(), 1u);
  // The placement was not started (no SetAgent): a new request sees the same free slots.
  s.RemoveRequest("t1");
  s.SetRequest(Req("t2", 2, 42, 2));
  ASSERT_EQ(s.Schedule().size(), 1u);
  EXPECT_EQ(s.Schedule()[0].agents[0].slots, (std::vector<std::string>{"0", "1"}));
}

}  // namespace
}  // namespace det::master::scheduler
