// What a scheduler request stands for: a trial's next run or a checkpoint GC task's next
// attempt. The scheduler (master/scheduler) knows requests by an opaque string key; the
// scheduling pass keeps the typed id beside each key it hands out, so nothing is parsed
// back from strings.
#ifndef DET_MASTER_SCHEDULING_REQUEST_ID_H_
#define DET_MASTER_SCHEDULING_REQUEST_ID_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace det::master {

struct RequestId {
  enum class Kind { kTrial, kGc };
  Kind kind = Kind::kTrial;
  int64_t id = 0;

  static RequestId Trial(int64_t trial_id) { return {Kind::kTrial, trial_id}; }
  static RequestId Gc(int64_t task_id) { return {Kind::kGc, task_id}; }

  // The scheduler's key, also what users read in waiting reasons ("preempted by trial 7"):
  // "7" for trial 7, "gc-7" for checkpoint GC task 7.
  std::string Key() const {
    return kind == Kind::kTrial ? absl::StrCat(id) : absl::StrCat("gc-", id);
  }
  // A number standing for it (the scheduler's per-request tag), and back.
  uint64_t Tag() const {
    return static_cast<uint64_t>(id) << 1 | (kind == Kind::kGc ? 1 : 0);
  }
  static RequestId FromTag(uint64_t tag) {
    return {tag & 1 ? Kind::kGc : Kind::kTrial, static_cast<int64_t>(tag >> 1)};
  }
  bool operator<(const RequestId& o) const {
    return std::tie(kind, id) < std::tie(o.kind, o.id);
  }
  bool operator==(const RequestId& o) const { return kind == o.kind && id == o.id; }
  template <typename H>
  friend H AbslHashValue(H h, const RequestId& r) {
    return H::combine(std::move(h), r.kind, r.id);
  }
};

// The typed ids of keys handed out (SelectPreemptions' running allocations).
class RequestIds {
 public:
  // The key of `id`, remembered for At().
  std::string Add(RequestId id) {
    std::string key = id.Key();
    by_key_[key] = id;
    return key;
  }
  // Forgets `id`'s key.
  void Remove(const RequestId& id) { by_key_.erase(id.Key()); }
  // REQUIRES: `key` came from Add() on this object (and was not removed since).
  const RequestId& At(const std::string& key) const { return by_key_.at(key); }

 private:
  absl::flat_hash_map<std::string, RequestId> by_key_;
};

}  // namespace det::master

#endif  // DET_MASTER_SCHEDULING_REQUEST_ID_H_
