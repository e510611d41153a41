// libFuzzer target for the experiment config parser: arbitrary bytes as a config, a
// template and --config overrides. It must never crash, hang or leak, and what it accepts
// must be stable: the effective config parses back to itself, and its searcher can start.
//
// Input: CONFIG [ NUL TEMPLATE [ NUL OVERRIDE ]... ]. The template, when present, is the
// stored template "t" and the config is merged over it.
//
// Built with clang and -fsanitize=fuzzer by tests/fuzz/run.sh; built with the default
// toolchain as config_fuzzer_corpus_test, which runs every file in tests/fuzz/corpus.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/config/experiment_config.h"
#include "master/searcher/searcher.h"

namespace {

// What the fuzzer found is a bug: stop loudly, so it is kept as a crasher.
void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "config_fuzzer: property violated: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts =
      absl::StrSplit(std::string(reinterpret_cast<const char*>(data), size), '\0');
  det::config::ConfigInput input;
  input.config_yaml = parts[0];
  input.config_path = "fuzz.yaml";
  std::string tmpl;
  if (parts.size() > 1) {
    tmpl = parts[1];
    input.template_name = "t";
  }
  for (size_t i = 2; i < parts.size(); ++i) input.overrides.push_back(parts[i]);
  det::config::TemplateLookup lookup = [&tmpl](const std::string& name)
      -> absl::StatusOr<std::string> {
    if (name != "t") return absl::NotFoundError("no such template");
    return tmpl;
  };

  // Templates are validated on their own before they are stored.
  (void)det::config::ValidateTemplate(parts[0], "template t");

  auto parsed = det::config::ParseExperimentConfig(input, lookup, 12345);
  if (!parsed.ok()) {
    Check(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  auto again = det::config::ParseExperimentConfig(parsed->effective_yaml, "effective", 999);
  Check(again.ok(), "the effective config does not parse");
  Check(again->effective_yaml == parsed->effective_yaml, "the effective config is not stable");
  Check(again->config.experiment_seed == parsed->config.experiment_seed, "the seed changed");

  auto searcher = det::master::searcher::NewSearcher(parsed->config);
  Check(searcher.ok(), "a valid config has no searcher");
  // Drawing trials is linear in their number; a few hundred show the code paths.
  if ((*searcher)->PlannedTrials() <= 256) {
    auto trials = (*searcher)->NextTrials();
    Check(!trials.empty(), "a new search creates no trial");
    for (const auto& t : trials) Check(t.seed <= 2147483647u, "a trial seed out of range");
    (*searcher)->OnValidation(0, trials[0].target_batches, 0.5);
    (*searcher)->OnTrialEnded(0);
  }
  return 0;
}
