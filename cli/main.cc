// det: the command-line client of a det cluster.
#include <iostream>
#include <string>
#include <vector>

#include "cli/det_cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return det::cli::RunDet(args, std::cout, std::cerr);
}
