// The identity of a model context (ModelContextRef.sha256): what the master computes when
// it stores one and what agents cache it by.
#ifndef DET_COMMON_RPC_CONTEXT_SHA256_H_
#define DET_COMMON_RPC_CONTEXT_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace det::rpc {

// SHA-256 of `serialized_context` (a serialized v1::ModelContext), 64 lowercase hex digits.
std::string ContextSha256(absl::string_view serialized_context);

}  // namespace det::rpc

#endif  // DET_COMMON_RPC_CONTEXT_SHA256_H_
