// What a worker process knows about its place in a trial, read from the environment the
// agent gives it: the trial spec the master resolved (v1::TrialSpec, in the file
// DET_TRIAL_SPEC_FILE names) and the rank's own variables (DET_MASTER, DET_ALLOCATION_*,
// RANK, WORLD_SIZE, ...). The experiment config (DET_EXPERIMENT_CONFIG_FILE) is user
// code's copy; nothing here reads it.
#ifndef DET_COMMON_WORKER_CPP_HARNESS_CONTEXT_H_
#define DET_COMMON_WORKER_CPP_HARNESS_CONTEXT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/worker.pb.h"

namespace det::harness {

struct TrialContext {
  // What the master resolved for this run (proto/worker.proto): ids, seed, batch sizes,
  // periods in batches, searcher metric and length, checkpoint directory and policy,
  // optimizations, target batches, latest checkpoint. Held as sent, never copied field by
  // field: a field added to the proto reaches training code as spec.<field>().
  v1::TrialSpec spec;
  // spec.hparams_json() and spec.data_json() (the config's free-form `data`, an object,
  // empty when absent), parsed once.
  nlohmann::json hparams = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();

  // The rank's own launch variables (docs/worker.md).
  std::string master;  // host:port of the master (DET_MASTER)
  std::string allocation_id;
  std::string allocation_token;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  // Address the collective listens on (DET_COLLECTIVE_HOST) and a network interface that
  // overrides it (DET_COLLECTIVE_IFACE, like Determined's dtrain_network_interface);
  // empty: see harness::ConnectCollective.
  std::string collective_host;
  std::string collective_iface;
  // How long a peer's host may be silent (pulled cable, host gone) before the collective
  // gives up on it and names it (DET_COLLECTIVE_PEER_TIMEOUT, a duration such as "30s",
  // e.g. from the experiment's environment_variables; collective::GlooOptions::peer_timeout).
  absl::Duration collective_peer_timeout = absl::Seconds(15);
  // The kind of slots this rank got (DET_SLOT_TYPE): "cuda" (one GPU per rank, the only
  // device CUDA_VISIBLE_DEVICES leaves) or "cpu".
  std::string slot_type = "cpu";

  bool is_chief() const { return rank == 0; }
  // spec.global_batch_size() / world_size (remainder dropped).
  int64_t per_slot_batch_size() const { return spec.global_batch_size() / world_size; }
  // The batch one step really trains on: per_slot_batch_size() * world_size.
  int64_t effective_global_batch_size() const { return per_slot_batch_size() * world_size; }
  // A hyperparameter, or `fallback` when absent. InvalidArgument on a wrong type.
  absl::StatusOr<double> HparamDouble(const std::string& name, double fallback) const;
  absl::StatusOr<int64_t> HparamInt(const std::string& name, int64_t fallback) const;
  // data.<key> as a string, or `fallback`.
  std::string DataString(const std::string& key, const std::string& fallback) const;
  // data.<key> as an integer, or `fallback`.
  int64_t DataInt(const std::string& key, int64_t fallback) const;
};

// Reads `env` (name -> value) and the trial spec file it names (DET_TRIAL_SPEC_FILE).
// Missing or malformed required variables (DET_TRIAL_SPEC_FILE and its file, DET_MASTER,
// DET_ALLOCATION_ID, DET_ALLOCATION_TOKEN, RANK, ...) are FailedPrecondition naming the variable: the process was not
// started by a det agent (of this version).
absl::StatusOr<TrialContext> ContextFromEnvironment(const std::map<std::string, std::string>& env);

// The current process environment as a map.
std::map<std::string, std::string> ProcessEnvironment();

}  // namespace det::harness

#endif  // DET_COMMON_WORKER_CPP_HARNESS_CONTEXT_H_
