// The transition table of a trial's states: every move between two trial states is
// either in the legal list below (allowed) or refused with FailedPrecondition naming the
// trial, both states and why; states that are no trial's are refused as such.
#include "master/trials/transitions.h"

#include <set>
#include <string>
#include <utility>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::det::testing::StatusIs;
using ::testing::HasSubstr;

constexpr v1::State kTrialStates[] = {
    v1::STATE_QUEUED,    v1::STATE_STARTING, v1::STATE_RUNNING, v1::STATE_PAUSED,
    v1::STATE_COMPLETED, v1::STATE_CANCELED, v1::STATE_ERROR,
};
constexpr v1::State kOtherStates[] = {v1::STATE_UNSPECIFIED, v1::STATE_ACTIVE,
                                      v1::STATE_STOPPING, v1::STATE_DELETED};

using Move = std::pair<v1::State, v1::State>;

// Every legal move, written out (not derived from the code under test).
const std::set<Move>& LegalMoves() {
  static const auto* moves = new std::set<Move>{
      // A queued trial starts a run, pauses with its experiment, or ends without running
      // (killed, stopped by the searcher).
      {v1::STATE_QUEUED, v1::STATE_STARTING},
      {v1::STATE_QUEUED, v1::STATE_PAUSED},
      {v1::STATE_QUEUED, v1::STATE_COMPLETED},
      {v1::STATE_QUEUED, v1::STATE_CANCELED},
      {v1::STATE_QUEUED, v1::STATE_ERROR},
      // A starting run is launched, or ends before that (requeued, paused, restarted, ended).
      {v1::STATE_STARTING, v1::STATE_RUNNING},
      {v1::STATE_STARTING, v1::STATE_QUEUED},
      {v1::STATE_STARTING, v1::STATE_PAUSED},
      {v1::STATE_STARTING, v1::STATE_COMPLETED},
      {v1::STATE_STARTING, v1::STATE_CANCELED},
      {v1::STATE_STARTING, v1::STATE_ERROR},
      // A running trial's run ends: requeued (preempted, lost agent, restart), paused, ended.
      {v1::STATE_RUNNING, v1::STATE_QUEUED},
      {v1::STATE_RUNNING, v1::STATE_PAUSED},
      {v1::STATE_RUNNING, v1::STATE_COMPLETED},
      {v1::STATE_RUNNING, v1::STATE_CANCELED},
      {v1::STATE_RUNNING, v1::STATE_ERROR},
      // A paused trial is queued again (activate, recovery) or ends (killed, stopped).
      {v1::STATE_PAUSED, v1::STATE_QUEUED},
      {v1::STATE_PAUSED, v1::STATE_COMPLETED},
      {v1::STATE_PAUSED, v1::STATE_CANCELED},
      {v1::STATE_PAUSED, v1::STATE_ERROR},
  };
  return *moves;
}

std::string Name(v1::State s) { return v1::State_Name(s).substr(6); }

TEST(TrialTransitionsTest, EveryLegalMoveIsAllowed) {
  for (const auto& [from, to] : LegalMoves()) {
    EXPECT_TRUE(CheckTrialTransition(7, from, to).ok()) << Name(from) << " -> " << Name(to);
  }
}

TEST(TrialTransitionsTest, EveryOtherMoveBetweenTrialStatesIsRefusedSayingWhy) {
  int refused = 0;
  for (v1::State from : kTrialStates) {
    for (v1::State to : kTrialStates) {
      if (LegalMoves().count({from, to})) continue;
      ++refused;
      const std::string move =
          "trial 7 cannot go from " + Name(from) + " to " + Name(to) + ": ";
      std::string why;
      if (IsEndedTrialState(from)) {
        why = "an ended trial does not change (det experiment continue revives it)";
      } else if (from == to) {
        why = "it is already there";
      } else if (to == v1::STATE_STARTING) {
        why = "only a QUEUED trial starts a run";
      } else {
        ASSERT_EQ(to, v1::STATE_RUNNING) << Name(from) << " -> " << Name(to);
        why = "only a STARTING trial's run comes to run";
      }
      EXPECT_THAT(CheckTrialTransition(7, from, to),
                  StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::Eq(move + why)));
    }
  }
  // 49 pairs: 20 legal; 21 out of the 3 ends; 4 staying; 4 to STARTING or RUNNING.
  EXPECT_EQ(refused, 49 - 20);
}

TEST(TrialTransitionsTest, StatesOfNoTrialAreRefusedByName) {
  for (v1::State other : kOtherStates) {
    for (v1::State s : kTrialStates) {
      const std::string what = "trial 7: " + Name(other) + " is not a trial state";
      EXPECT_THAT(CheckTrialTransition(7, other, s),
                  StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Eq(what)));
      EXPECT_THAT(CheckTrialTransition(7, s, other),
                  StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Eq(what)));
    }
  }
  EXPECT_THAT(CheckTrialTransition(7, v1::STATE_QUEUED, static_cast<v1::State>(77)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state 77")));
}

TEST(TrialTransitionsTest, OnlyAnEndedTrialIsRevived) {
  for (v1::State from : {v1::STATE_COMPLETED, v1::STATE_CANCELED, v1::STATE_ERROR}) {
    EXPECT_TRUE(CheckTrialRevival(7, from).ok()) << Name(from);
  }
  for (v1::State from :
       {v1::STATE_QUEUED, v1::STATE_STARTING, v1::STATE_RUNNING, v1::STATE_PAUSED}) {
    EXPECT_THAT(CheckTrialRevival(7, from),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         ::testing::Eq("trial 7 cannot be revived from " + Name(from) +
                                       ": only an ended trial (COMPLETED, CANCELED or "
                                       "ERROR) is revived")));
  }
  for (v1::State other : kOtherStates) {
    EXPECT_THAT(CheckTrialRevival(7, other),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::Eq("trial 7: " + Name(other) + " is not a trial state")));
  }
}

TEST(TrialTransitionsTest, TrialAndEndedStates) {
  std::set<v1::State> ended;
  for (v1::State s : kTrialStates) {
    EXPECT_TRUE(IsTrialState(s)) << Name(s);
    if (IsEndedTrialState(s)) ended.insert(s);
  }
  EXPECT_EQ(ended, (std::set<v1::State>{v1::STATE_COMPLETED, v1::STATE_CANCELED,
                                        v1::STATE_ERROR}));
  for (v1::State s : kOtherStates) {
    EXPECT_FALSE(IsTrialState(s)) << Name(s);
    EXPECT_FALSE(IsEndedTrialState(s)) << Name(s);
  }
}

}  // namespace
}  // namespace det::master
