// The det command-line interface as a function, so that it runs the same from main()
// and in-process from tests.
#ifndef DET_CLI_DET_CLI_H_
#define DET_CLI_DET_CLI_H_

#include <ostream>
#include <string>
#include <vector>

namespace det::cli {

// Runs `det ARGS...` (`args` excludes the program name). Results go to `out`; errors go
// to `err` as one line "det: <reason>" (or CLI11's message for a bad command line).
// Returns the process exit code: 0 on success.
int RunDet(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace det::cli

#endif  // DET_CLI_DET_CLI_H_
