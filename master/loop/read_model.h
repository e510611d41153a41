// What readers of the master's state are answered from, off the loop: pieces (a list, a
// describe) that the loop builds and publishes as one immutable snapshot. A piece is
// asked for by key with the closure that builds it on the loop; once asked for, it is
// rebuilt at the end of every turn (Publish) until no reader has asked for it for
// Options::ttl, so a reader finds it current and is answered on its own thread, without
// waiting for the loop, even while the loop is busy with a turn. A piece not in the
// snapshot, or a snapshot older than the latest turn's end, is built by a refresh that
// runs on the loop ahead of queued turns (coalesced: one refresh serves every reader
// waiting), and those readers are answered on the loop.
//
// Consistency: a write is acknowledged after its turn ends (Turns), and the turn's end
// publishes first, so a read begun after the acknowledgement sees the write. While a turn's
// end builds its snapshot, readers are answered from the previous one (the turn's writes are
// not acknowledged yet): a publication never makes readers wait for the loop.
//
// Thread: Read from any thread; Publish, Refresh and Invalidate on the loop only.
#ifndef DET_MASTER_LOOP_READ_MODEL_H_
#define DET_MASTER_LOOP_READ_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "google/protobuf/message.h"

namespace det::master {

class ReadModel {
 public:
  using Message = google::protobuf::Message;
  // Fills `out` (empty, of the piece's type) from the loop's state; on the loop.
  using Build = std::function<absl::Status(Message* out)>;
  // A piece as published: its Build's status and, when OK, what it filled.
  struct Piece {
    absl::Status status;
    std::shared_ptr<const Message> value;
  };
  using Answer = std::function<void(const Piece&)>;

  struct Options {
    // A piece no reader asked for in this long is no longer rebuilt (Clock time).
    absl::Duration ttl = absl::Seconds(30);
    // At most this many pieces are kept; the least recently read go first.
    size_t max_pieces = 512;
  };

  // `loop` and `clock` must outlive this.
  ReadModel(EventLoop& loop, Clock& clock, Options options);
  ReadModel(EventLoop& loop, Clock& clock) : ReadModel(loop, clock, Options()) {}

  // Calls `answer` once with piece `key` as of the end of the latest turn: at once on
  // this thread when the snapshot has it, else on the loop after a refresh. `build` fills
  // an instance of `prototype`'s type; it and `prototype` must not refer to the caller's
  // state (they are kept). `stable`: the piece changes only when Invalidate names it (it
  // is not rebuilt at every turn's end).
  void Read(const std::string& key, const Message& prototype, Build build, Answer answer,
            bool stable = false);

  // On the loop, at the end of every turn (Turns::SetPublish): rebuilds the pieces read
  // lately and publishes them as the snapshot of this turn's end (the turn counts as ended
  // for readers once it is published).
  void Publish();
  // On the loop: the stable pieces whose key starts with `prefix` are rebuilt at the next
  // publication.
  void Invalidate(const std::string& prefix);

  // For tests: refreshes and publications run so far; readers waiting for a refresh.
  int64_t refreshes() const;
  size_t waiting_readers() const;

 private:
  struct Source {
    std::unique_ptr<Message> prototype;
    Build build;
    bool stable = false;
  };
  struct Snapshot {
    uint64_t version = 0;  // turns ended when it was built
    std::map<std::string, Piece> pieces;
  };
  struct Waiter {
    std::string key;
    std::shared_ptr<Source> source;
    Answer answer;
  };

  // On the loop, ahead of queued turns: adds the waiting readers' pieces, publishes, and
  // answers them.
  void Refresh();
  // Builds a snapshot of version `version` from `previous`: every source when `all`, else
  // only those `previous` lacks. Drops sources not read within the ttl.
  std::shared_ptr<const Snapshot> Rebuild(const Snapshot& previous, uint64_t version, bool all);
  Piece BuildPiece(const Source& s) const;

  EventLoop& loop_;
  Clock& clock_;
  const Options options_;
  // Loop only.
  std::map<std::string, std::shared_ptr<Source>> sources_;
  std::vector<std::string> invalidated_;

  mutable absl::Mutex mu_;
  uint64_t ended_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const Snapshot> snapshot_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> last_read_ms_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiting_ ABSL_GUARDED_BY(mu_);
  bool refresh_posted_ ABSL_GUARDED_BY(mu_) = false;
  int64_t refreshes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace det::master

#endif  // DET_MASTER_LOOP_READ_MODEL_H_
