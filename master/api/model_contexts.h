// ModelContexts: reads experiments' model contexts (up to 64 MiB each) for agents
// (GetModelContext) on a thread of its own, so that the loop never reads one.
//
// Thread: Read is called on the master's loop (it opens the store's reader there the
// first time); the read itself and `done` run on the reader's thread.
#ifndef DET_MASTER_API_MODEL_CONTEXTS_H_
#define DET_MASTER_API_MODEL_CONTEXTS_H_

#include <cstdint>
#include <memory>

#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/api/handlers.h"
#include "master/store/store.h"

namespace det::master {

class ModelContexts {
 public:
  // `clock` and `store` must outlive this.
  ModelContexts(Clock& clock, Store& store) : store_(store), reads_(clock) {}
  // Waits for the reads queued.
  ~ModelContexts();

  // Fills `response` with experiment `experiment_id`'s stored context and its SHA-256,
  // then calls `done`. The read sees every write the store acknowledged before the call.
  void Read(int64_t experiment_id, v1::GetModelContextResponse* response, Done done);

 private:
  Store& store_;
  // Opened by the first Read (on the loop), then used on reads_'s thread only.
  std::unique_ptr<MetricsReader> reader_;
  // Declared after reader_ so that it stops first.
  EventLoop reads_;
};

}  // namespace det::master

#endif  // DET_MASTER_API_MODEL_CONTEXTS_H_
