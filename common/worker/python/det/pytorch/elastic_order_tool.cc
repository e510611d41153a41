// Prints det::data::ElasticLoader's windows as one rank sees them, for the Python
// ElasticSampler's cross-check (sampler_test.py). Usage:
//   elastic_order_tool N SEED NODES BATCH WORLD RANK STEPS [STATE_JSON]
// Each step prints "EPOCH FIRST_POSITION ID ID ..." (the rank's slice of the window); with
// STATE_JSON (a LoaderState as JSON, e.g. the Python sampler's state_dict()) the loader is
// restored there first. The last line is "state <LoaderState JSON after the steps>".
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "common/worker/cpp/data/elastic_sampler.h"

namespace {

int Fail(const std::string& message) {
  std::cerr << "elastic_order_tool: " << message << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8 && argc != 9) {
    return Fail("usage: elastic_order_tool N SEED NODES BATCH WORLD RANK STEPS [STATE_JSON]");
  }
  const char* names[] = {"N", "SEED", "NODES", "BATCH", "WORLD", "RANK", "STEPS"};
  int64_t v[7];
  uint64_t seed = 0;
  for (int i = 0; i < 7; ++i) {
    bool ok = i == 1 ? absl::SimpleAtoi(argv[i + 1], &seed) : absl::SimpleAtoi(argv[i + 1], &v[i]);
    if (!ok) return Fail(std::string(names[i]) + " is not an integer: " + argv[i + 1]);
  }
  const int64_t n = v[0], nodes = v[2], batch = v[3], world = v[4], rank = v[5], steps = v[6];
  if (n < 1 || nodes < 1 || batch < 1 || batch > n || world < 1 || batch % world != 0 || rank < 0 ||
      rank >= world || steps < 0) {
    return Fail("need N >= BATCH >= 1, NODES >= 1, WORLD dividing BATCH, 0 <= RANK < WORLD, STEPS >= 0");
  }
  det::data::ElasticLoader loader(n, 0, seed, nodes, batch);
  if (argc == 9) {
    nlohmann::json j = nlohmann::json::parse(argv[8], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Fail(std::string("STATE_JSON is not JSON: ") + argv[8]);
    absl::StatusOr<det::data::LoaderState> state = det::data::LoaderState::FromJson(j);
    if (!state.ok()) return Fail(std::string(state.status().message()));
    absl::StatusOr<det::data::ElasticLoader> restored = det::data::ElasticLoader::Restore(*state, n, 0, batch);
    if (!restored.ok()) return Fail(std::string(restored.status().message()));
    loader = *std::move(restored);
  }
  for (int64_t s = 0; s < steps; ++s) {
    det::data::Window w = loader.Next();
    std::cout << w.epoch << ' ' << w.first_position;
    for (int64_t id : det::data::ElasticLoader::RankSlice(w, static_cast<int>(rank), static_cast<int>(world))) {
      std::cout << ' ' << id;
    }
    std::cout << '\n';
  }
  std::cout << "state " << loader.state().ToJson().dump() << std::endl;
  return 0;
}
