// CreateExperimentStream's messages (proto/api.proto): a request whose model context is
// cut into pieces (the CLI's side) and put back together with the context's limits checked
// at every piece (the master's side). One piece of code for both ends.
#ifndef DET_COMMON_RPC_CONTEXT_UPLOAD_H_
#define DET_COMMON_RPC_CONTEXT_UPLOAD_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/limits.h"
#include "proto/api.pb.h"

namespace det::rpc {

// The most content one ContextFileChunk carries.
inline constexpr int64_t kMaxContextChunkBytes = int64_t{1} << 20;

// Calls `write` with the messages of `request` in order: the request without its context
// (with the context's totals), then each file in pieces of at most kMaxContextChunkBytes
// (an empty file as one empty piece). Stops at the first `write` that returns false.
// Returns whether every write returned true.
bool SplitContext(const v1::CreateExperimentRequest& request,
                  const std::function<bool(const v1::CreateExperimentChunk&)>& write);

// Puts a CreateExperimentStream back together. Add each message in the order received,
// then Finish. Add refuses (InvalidArgument naming the limit and the path) as soon as a
// message passes a limit of common/config/limits.h: the declared or received count of
// files or bytes, a piece larger than kMaxContextChunkBytes, a path that breaks a rule, a
// piece out of order. (A path that is both a file and a directory of another shows only
// in the whole list: the experiment manager checks that, for every context.) After an
// error the assembler must not be used again.
//
// Not thread-safe (one stream, read by one thread at a time).
class ContextAssembler {
 public:
  absl::Status Add(v1::CreateExperimentChunk chunk);
  // The whole request (`context` filled). InvalidArgument when the stream ended early:
  // no request, a file short of its size, fewer files or bytes than declared.
  absl::StatusOr<v1::CreateExperimentRequest> Finish();

 private:
  // InvalidArgument unless the current file has all of its bytes.
  absl::Status CheckCurrentComplete() const;

  bool started_ = false;
  v1::CreateExperimentRequest request_;
  int64_t declared_files_ = 0;
  int64_t declared_bytes_ = 0;
  // Sizes announced so far (of files begun), and bytes received.
  int64_t announced_bytes_ = 0;
  int64_t received_bytes_ = 0;
  // The file being received (the last of request_.context()) and its size.
  int64_t current_size_ = 0;
  std::set<std::string> paths_;
};

}  // namespace det::rpc

#endif  // DET_COMMON_RPC_CONTEXT_UPLOAD_H_
