// The trial spec: what a worker needs to train one run of a trial (v1::TrialSpec, see
// proto/worker.proto), resolved once on the master from the experiment's typed config and
// the trial. Pure functions, no I/O: table-tested in trial_spec_test.cc.
#ifndef DET_COMMON_CONFIG_TRIAL_SPEC_H_
#define DET_COMMON_CONFIG_TRIAL_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/experiment_config.h"
#include "proto/types.pb.h"
#include "proto/worker.pb.h"

namespace det::config {

// The launch variable the master sends the spec in (EncodeTrialSpec's text). The agent
// writes it to a file and gives every rank that file's path in kTrialSpecFileEnv
// (agent/launcher: a spec may be larger than one environment string may hold).
inline constexpr char kTrialSpecEnv[] = "DET_TRIAL_SPEC";
inline constexpr char kTrialSpecFileEnv[] = "DET_TRIAL_SPEC_FILE";

// The spec of `trial` (its id, run, seed, hyperparameters, target and latest checkpoint as
// it starts this run) of experiment `experiment_id`, whose config is `config`. Lengths in
// epochs and records are converted to batches with the trial's own global batch size
// (TrialGlobalBatchSize: a searched one comes from the trial's hyperparameters). Without
// searcher.max_length (single, grid, random) the spec's searcher.max_length_unit is "" and
// its max_length_value and max_length_batches are 0; with target_batches 0 (what the
// searcher gives such a trial) that means no limit: the script decides when to stop.
v1::TrialSpec BuildTrialSpec(const ExperimentConfig& config, int64_t experiment_id,
                             const v1::Trial& trial);

// The spec as DET_TRIAL_SPEC carries it: protobuf's JSON mapping, field names as in the
// .proto, on one line.
std::string EncodeTrialSpec(const v1::TrialSpec& spec);

// EncodeTrialSpec's inverse. A missing (empty) or malformed value is FailedPrecondition
// naming DET_TRIAL_SPEC_FILE: the process was not started by a det agent of this version.
absl::StatusOr<v1::TrialSpec> DecodeTrialSpec(absl::string_view text);

}  // namespace det::config

#endif  // DET_COMMON_CONFIG_TRIAL_SPEC_H_
