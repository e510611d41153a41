// The Rendezvous of a trial's ranks, served by the master (WorkerService.Rendezvous) and
// authenticated by the allocation's token: ranks on different machines need nothing in
// common but the master. Values travel base64-encoded, so any bytes are fine.
// Transient failures (the master restarting) are retried until the timeout.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_RENDEZVOUS_CLIENT_H_
#define DET_COMMON_WORKER_CPP_HARNESS_RENDEZVOUS_CLIENT_H_

#include <memory>

#include "common/worker/cpp/collective/rendezvous.h"
#include "common/worker/cpp/harness/context.h"

namespace det::harness {

std::unique_ptr<collective::Rendezvous> NewMasterRendezvous(const TrialContext& context);

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_RENDEZVOUS_CLIENT_H_
