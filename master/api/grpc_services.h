// gRPC adapters: each RPC hands its request to the plain C++ handler and finishes the call
// with the handler's status. No logic here.
#ifndef DET_MASTER_API_GRPC_SERVICES_H_
#define DET_MASTER_API_GRPC_SERVICES_H_

#include <memory>

#include "grpcpp/grpcpp.h"
#include "master/api/handlers.h"
#include "proto/agent.grpc.pb.h"
#include "proto/api.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

namespace det::master {

// absl::Status -> grpc::Status (the codes map 1:1).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The three services, registered on `builder`; they must outlive the server. With
// `users` (which must outlive them too), every call of the user API but Login is
// authenticated first ("authorization: Bearer TOKEN" metadata) and its handler gets that
// caller, and the user RPCs (Login, WhoAmI, ...) are served; without, ApiHandler methods
// get an empty Caller and the user RPCs answer UNIMPLEMENTED.
std::vector<std::unique_ptr<grpc::Service>> MakeGrpcServices(ApiHandler& api, AgentHandler& agent,
                                                             WorkerHandler& worker,
                                                             UserHandler* users = nullptr);

}  // namespace det::master

#endif  // DET_MASTER_API_GRPC_SERVICES_H_
