#include "master/trials/transitions.h"

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

std::string Name(v1::State s) {
  const std::string& name = v1::State_Name(s);
  return name.empty() ? absl::StrCat("state ", static_cast<int>(s)) : name.substr(6);
}

// The live moves (every live state may also end).
struct Move {
  v1::State from;
  v1::State to;
};
constexpr Move kLiveMoves[] = {
    {v1::STATE_QUEUED, v1::STATE_STARTING},  {v1::STATE_QUEUED, v1::STATE_PAUSED},
    {v1::STATE_STARTING, v1::STATE_RUNNING}, {v1::STATE_STARTING, v1::STATE_QUEUED},
    {v1::STATE_STARTING, v1::STATE_PAUSED},  {v1::STATE_RUNNING, v1::STATE_QUEUED},
    {v1::STATE_RUNNING, v1::STATE_PAUSED},   {v1::STATE_PAUSED, v1::STATE_QUEUED},
};

// Why a live state not in kLiveMoves cannot reach live state `to` (only STARTING and
// RUNNING have such states besides `to` itself).
const char* OnlyFrom(v1::State to) {
  return to == v1::STATE_STARTING ? "only a QUEUED trial starts a run"
                                  : "only a STARTING trial's run comes to run";
}

}  // namespace

bool IsEndedTrialState(v1::State s) {
  return s == v1::STATE_COMPLETED || s == v1::STATE_CANCELED || s == v1::STATE_ERROR;
}

bool IsTrialState(v1::State s) {
  return s == v1::STATE_QUEUED || s == v1::STATE_STARTING || s == v1::STATE_RUNNING ||
         s == v1::STATE_PAUSED || IsEndedTrialState(s);
}

absl::Status CheckTrialTransition(int64_t trial_id, v1::State from, v1::State to) {
  for (v1::State s : {from, to}) {
    if (!IsTrialState(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("trial ", trial_id, ": ", Name(s), " is not a trial state"));
    }
  }
  const std::string move =
      absl::StrCat("trial ", trial_id, " cannot go from ", Name(from), " to ", Name(to), ": ");
  if (IsEndedTrialState(from)) {
    return absl::FailedPreconditionError(absl::StrCat(
        move, "an ended trial does not change (det experiment continue revives it)"));
  }
  if (from == to) return absl::FailedPreconditionError(absl::StrCat(move, "it is already there"));
  if (IsEndedTrialState(to)) return absl::OkStatus();
  for (const Move& m : kLiveMoves) {
    if (m.from == from && m.to == to) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(move, OnlyFrom(to)));
}

absl::Status CheckTrialRevival(int64_t trial_id, v1::State from) {
  if (!IsTrialState(from)) {
    return absl::InvalidArgumentError(
        absl::StrCat("trial ", trial_id, ": ", Name(from), " is not a trial state"));
  }
  if (IsEndedTrialState(from)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("trial ", trial_id, " cannot be revived from ", Name(from),
                   ": only an ended trial (COMPLETED, CANCELED or ERROR) is revived"));
}

}  // namespace det::master
