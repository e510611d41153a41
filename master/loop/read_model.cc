#include "master/loop/read_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "master/loop/on_loop.h"

namespace det::master {

ReadModel::ReadModel(EventLoop& loop, Clock& clock, Options options)
    : loop_(loop), clock_(clock), options_(options), snapshot_(std::make_shared<Snapshot>()) {}

void ReadModel::Read(const std::string& key, const Message& prototype, Build build,
                     Answer answer, bool stable) {
  const int64_t now = clock_.NowMs();
  Piece piece;
  bool found = false;
  bool post = false;
  {
    absl::MutexLock lock(&mu_);
    last_read_ms_[key] = now;
    if (snapshot_->version == ended_) {
      auto it = snapshot_->pieces.find(key);
      if (it != snapshot_->pieces.end()) {
        piece = it->second;
        found = true;
      }
    }
    if (!found) {
      auto source = std::make_shared<Source>();
      source->prototype.reset(prototype.New());
      source->build = std::move(build);
      source->stable = stable;
      waiting_.push_back(Waiter{key, std::move(source), std::move(answer)});
      post = !refresh_posted_;
      refresh_posted_ = true;
    }
  }
  if (found) {
    answer(piece);
    return;
  }
  if (post) loop_.PostUrgent([this] { Refresh(); });
}

ReadModel::Piece ReadModel::BuildPiece(const Source& s) const {
  std::shared_ptr<Message> out(s.prototype->New());
  Piece piece;
  piece.status = s.build(out.get());
  if (piece.status.ok()) piece.value = std::move(out);
  return piece;
}

std::shared_ptr<const ReadModel::Snapshot> ReadModel::Rebuild(const Snapshot& previous,
                                                              uint64_t version, bool all) {
  // Forget the pieces nobody read lately (the least recently read beyond max_pieces).
  const int64_t oldest = clock_.NowMs() - absl::ToInt64Milliseconds(options_.ttl);
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::pair<int64_t, std::string>> by_age;
    for (auto it = sources_.begin(); it != sources_.end();) {
      auto read = last_read_ms_.find(it->first);
      if (read == last_read_ms_.end() || read->second < oldest) {
        if (read != last_read_ms_.end()) last_read_ms_.erase(read);
        it = sources_.erase(it);
        continue;
      }
      by_age.emplace_back(read->second, it->first);
      ++it;
    }
    if (by_age.size() > options_.max_pieces) {
      std::sort(by_age.begin(), by_age.end());
      for (size_t i = 0; i + options_.max_pieces < by_age.size(); ++i) {
        sources_.erase(by_age[i].second);
        last_read_ms_.erase(by_age[i].second);
      }
    }
  }
  auto next = std::make_shared<Snapshot>();
  next->version = version;
  for (const auto& [key, source] : sources_) {
    auto had = previous.pieces.find(key);
    bool keep = had != previous.pieces.end();
    if (keep && (all && !source->stable)) keep = false;
    if (keep && source->stable) {
      for (const std::string& prefix : invalidated_) {
        if (absl::StartsWith(key, prefix)) keep = false;
      }
    }
    next->pieces[key] = keep ? had->second : BuildPiece(*source);
  }
  if (all) invalidated_.clear();
  return next;
}

void ReadModel::Publish() {
  DET_CHECK_ON_LOOP(loop_);
  std::shared_ptr<const Snapshot> previous;
  uint64_t version;
  {
    absl::MutexLock lock(&mu_);
    version = ended_ + 1;
    if (sources_.empty()) {  // Nothing read lately: the next reader refreshes.
      ended_ = version;
      return;
    }
    previous = snapshot_;
  }
  // While this turn's pieces are built, readers are answered from the previous turn's
  // (this turn's acknowledgements wait for the swap below): no reader waits for the loop.
  std::shared_ptr<const Snapshot> next = Rebuild(*previous, version, /*all=*/true);
  absl::MutexLock lock(&mu_);
  ended_ = version;
  snapshot_ = std::move(next);
  ++refreshes_;
}

void ReadModel::Refresh() {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<Waiter> waiting;
  std::shared_ptr<const Snapshot> previous;
  uint64_t version;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(waiting_);
    refresh_posted_ = false;
    previous = snapshot_;
    version = ended_;
  }
  for (Waiter& w : waiting) {
    if (sources_.count(w.key) == 0) sources_[w.key] = w.source;
  }
  // Turns ended since the snapshot: every piece again; else only the new ones.
  std::shared_ptr<const Snapshot> next =
      Rebuild(*previous, version, /*all=*/previous->version != version);
  {
    absl::MutexLock lock(&mu_);
    snapshot_ = next;
    ++refreshes_;
  }
  for (Waiter& w : waiting) {
    auto it = next->pieces.find(w.key);
    // Dropped at once (max_pieces): built for this reader alone.
    w.answer(it != next->pieces.end() ? it->second : BuildPiece(*w.source));
  }
}

void ReadModel::Invalidate(const std::string& prefix) {
  DET_CHECK_ON_LOOP(loop_);
  invalidated_.push_back(prefix);
}

int64_t ReadModel::refreshes() const {
  absl::MutexLock lock(&mu_);
  return refreshes_;
}

size_t ReadModel::waiting_readers() const {
  absl::MutexLock lock(&mu_);
  return waiting_.size();
}

}  // namespace det::master
