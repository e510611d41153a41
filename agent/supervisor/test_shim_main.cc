// The worker shim alone, for the supervisor's tests (det-agent runs it the same way).
#include <string>
#include <vector>

#include "agent/supervisor/shim.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != det::agent::kWorkerShimFlag) return 2;
  return det::agent::RunWorkerShim(std::vector<std::string>(argv + 2, argv + argc));
}
