// Loop affinity: the master's state belongs to its event loop thread, and every method of
// a manager that touches it starts with DET_CHECK_ON_LOOP(loop). Called from any other
// thread, it logs the function and aborts (a programming error, never a runtime
// condition).
#ifndef DET_MASTER_LOOP_ON_LOOP_H_
#define DET_MASTER_LOOP_ON_LOOP_H_

#include <cstdlib>

#include "common/event_loop/event_loop.h"
#include "common/logging/logging.h"

#define DET_CHECK_ON_LOOP(loop)                                                        \
  do {                                                                                 \
    if (!(loop).InLoop()) {                                                            \
      ::det::Logger("master")->critical("{} ({}:{}) called off the master's loop",     \
                                        __func__, __FILE__, __LINE__);                 \
      std::abort();                                                                    \
    }                                                                                  \
  } while (false)

#endif  // DET_MASTER_LOOP_ON_LOOP_H_
