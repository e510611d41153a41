// The checkpoint garbage-collection process: `det-agent --checkpoint-gc SPEC_FILE`.
//
// The master schedules a CHECKPOINT_GC task (zero slots) on an agent of the experiment's
// resource pool, where the checkpoint storage is mounted; the agent writes the task's
// v1::CheckpointGcSpec to SPEC_FILE (JSON) and runs its own binary with this flag through
// the worker shim, as rank 0 of the task's allocation: killed, re-adopted after an agent
// restart, its exit reported and its output shipped exactly like a worker's.
#ifndef DET_AGENT_CHECKPOINT_GC_CHECKPOINT_GC_H_
#define DET_AGENT_CHECKPOINT_GC_CHECKPOINT_GC_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace det::agent {

inline constexpr char kCheckpointGcFlag[] = "--checkpoint-gc";

// The argv that runs the checkpoint-GC process of the det-agent binary `self` on
// `spec_file`.
std::vector<std::string> CheckpointGcArgv(const std::string& self, const std::string& spec_file);

// Writes `spec` to `path` as JSON. Errors name the path.
absl::Status WriteCheckpointGcSpec(const std::string& path, const v1::CheckpointGcSpec& spec);
// NotFound or InvalidArgument naming the path when it cannot be read or parsed.
absl::StatusOr<v1::CheckpointGcSpec> ReadCheckpointGcSpec(const std::string& path);

// Deletes every checkpoint directory of `spec` beneath spec.storage_root()
// (DeleteCheckpointFiles, common/checkpoint: a path that is not absolute, does not end in
// "/<uuid>", lies outside the root or passes a symbolic link below it is refused and
// nothing of it is deleted; one already gone is success), going on past failures. Writes one line per
// checkpoint: "deleted checkpoint UUID (PATH)" to `out`, or the reason to `err`. OK when
// every directory is gone; otherwise the status of the first failure, its message naming
// the checkpoint, with the number of failures.
absl::Status DeleteCheckpoints(const v1::CheckpointGcSpec& spec, std::ostream& out,
                               std::ostream& err);

// The process: `args` are the arguments after kCheckpointGcFlag (the spec file). Returns
// the exit code: 0 when every checkpoint is gone, 1 otherwise (the last line on stderr
// names the failing checkpoint), 2 for bad arguments or an unreadable spec.
int RunCheckpointGc(const std::vector<std::string>& args);

}  // namespace det::agent

#endif  // DET_AGENT_CHECKPOINT_GC_CHECKPOINT_GC_H_
