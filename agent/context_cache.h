// ContextCache: the experiments' model contexts an agent fetched from the master
// (GetModelContext), kept on disk under their SHA-256 so that the next allocation of the
// same experiment, on this agent or after its restart, does not fetch it again.
//
// Not thread-safe: one caller at a time (the agent's poll thread).
#ifndef DET_AGENT_CONTEXT_CACHE_H_
#define DET_AGENT_CONTEXT_CACHE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"
#include "proto/types.pb.h"

namespace det::agent {

class ContextCache {
 public:
  using Fetch = std::function<absl::StatusOr<v1::GetModelContextResponse>()>;

  // Contexts live in `dir` (created mode 0700 on first use; files 0600), the newest
  // `keep` of them.
  explicit ContextCache(std::string dir, int keep = 16) : dir_(std::move(dir)), keep_(keep) {}

  // The context `ref` names: the file of ref.sha256 when it holds exactly that (checked);
  // otherwise `fetch`'s, which must have ref.sha256 when that is set (DataLoss otherwise),
  // then kept. Errors name the experiment and say why (the master's status included).
  absl::StatusOr<v1::ModelContext> Get(const v1::ModelContextRef& ref, const Fetch& fetch);

 private:
  // Deletes the oldest files past keep_.
  void Trim();

  std::string dir_;
  int keep_;
};

}  // namespace det::agent

#endif  // DET_AGENT_CONTEXT_CACHE_H_
