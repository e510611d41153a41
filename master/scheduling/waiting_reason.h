// Why a queued trial waits, as TrialState keeps it: either its own text, or a text it
// shares with every request waiting behind the same blocker (one per resource pool,
// SchedulingService). When a freed agent moves a pool's blocker, the scheduling pass
// rewrites the one shared text instead of ~100,000 per-trial strings, and every trial
// behind it reads the new reason at once (describe, job list, the read model's pieces).
// Loop thread only, like TrialState: the shared text is changed on the loop.
#ifndef DET_MASTER_SCHEDULING_WAITING_REASON_H_
#define DET_MASTER_SCHEDULING_WAITING_REASON_H_

#include <memory>
#include <string>
#include <utility>

namespace det::master {

class WaitingReason {
 public:
  // The reason as users read it ("" when nothing was said).
  const std::string& get() const { return shared_ ? *shared_ : own_; }
  // Whether it holds `why` as a text of its own (a shared text never equals one: setting
  // its own text replaces it).
  bool operator==(const std::string& why) const { return !shared_ && own_ == why; }
  bool operator!=(const std::string& why) const { return !(*this == why); }
  // Its own text from now on.
  WaitingReason& operator=(const std::string& why) {
    shared_.reset();
    own_ = why;
    return *this;
  }
  // The shared text `why` from now on (whatever it says when read).
  void Share(std::shared_ptr<const std::string> why) {
    own_.clear();
    own_.shrink_to_fit();
    shared_ = std::move(why);
  }
  bool Shares(const std::shared_ptr<const std::string>& why) const { return shared_ == why; }
  void clear() {
    own_.clear();
    shared_.reset();
  }

 private:
  std::string own_;
  std::shared_ptr<const std::string> shared_;
};

}  // namespace det::master

#endif  // DET_MASTER_SCHEDULING_WAITING_REASON_H_
