// REST query and path parameters onto protobuf requests: the reflection that lets every
// REST route reuse its gRPC request message.
#ifndef DET_MASTER_HTTP_QUERY_PARAMS_H_
#define DET_MASTER_HTTP_QUERY_PARAMS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace det::master {

// Query and path parameters: name -> values (a name may repeat in a query).
using Params = std::map<std::string, std::vector<std::string>>;

// Sets the fields of `message` named by `params` (proto or JSON field names). A repeated
// field takes every value, each possibly a comma-separated list. InvalidArgument naming
// the parameter for an unknown name or a value of the wrong type.
absl::Status ApplyParams(const Params& params, google::protobuf::Message* message);

// Removes and returns the value of `name` (the last if repeated), if given.
std::optional<std::string> TakeParam(Params& params, const std::string& name);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_QUERY_PARAMS_H_
