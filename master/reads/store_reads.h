// StoreReads: the store reads that leave the master's loop (trial metrics, logs,
// checkpoints) run here, on a small pool of threads, each with a read connection of its own
// (Store::OpenReader: SQLite a read-only connection to the WAL database, PostgreSQL a
// connection of its own, the in-memory store the store itself). A read takes a free
// connection: no read waits for another beyond the pool's size, none for the loop. A read
// sees every write the store acknowledged before it began (MetricsReader's contract).
//
// Thread-safe: Read may be called from any thread, the loop included.
#ifndef DET_MASTER_READS_STORE_READS_H_
#define DET_MASTER_READS_STORE_READS_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "master/store/store.h"

namespace det::master {

class StoreReads {
 public:
  // The default size of the pool (master.yaml db_read_connections).
  static constexpr int kDefaultConnections = 4;

  // Opens `connections` readers of `store` (at least 1) and starts a thread for each. When
  // the store cannot open them (a private ":memory:" SQLite database, a server that
  // refuses), every read is answered with that error. REQUIRES: called where `store` may
  // be used (before the loop runs, or on it); `store` outlives this.
  StoreReads(Store& store, int connections);
  // Stop().
  ~StoreReads();
  StoreReads(const StoreReads&) = delete;
  StoreReads& operator=(const StoreReads&) = delete;

  // Runs `read` on a pool thread with a free connection, or with the error that kept the
  // pool from opening its connections; after Stop(), on the caller's thread with
  // Unavailable. `read` must not block on another read.
  using Read = std::function<void(absl::StatusOr<MetricsReader*> reader)>;
  void Submit(Read read);
  // Runs `fn` as Submit does; `done` gets its status (or the pool's error), called from the
  // thread that ran it.
  void Run(std::function<void(absl::Status)> done,
           std::function<absl::Status(MetricsReader& reader)> fn);

  // Runs the reads already submitted, then stops the threads. Idempotent.
  void Stop();

  // The number of connections (threads).
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  // The loop of each thread: runs reads on `reader` (null: answers them open_status_).
  void Work(MetricsReader* reader);
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status open_status_;
  std::vector<std::unique_ptr<MetricsReader>> readers_;
  mutable absl::Mutex mu_;
  std::deque<Read> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace det::master

#endif  // DET_MASTER_READS_STORE_READS_H_
