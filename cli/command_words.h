// Names the command word a user mistyped, before CLI11's generic messages ("A subcommand
// is required", "The following arguments were not expected") can hide it.
#ifndef DET_CLI_COMMAND_WORDS_H_
#define DET_CLI_COMMAND_WORDS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// Walks `args` (in command-line order) down `app`'s subcommand tree the way CLI11 does:
// an option of the current command or of an ancestor takes its value when it expects one;
// a word at a level that has subcommands must name one (or an alias). Returns, for the
// first word that does not:
//   "unknown command 'lsit' for 'det experiment'; did you mean 'list'?
//    commands: create, list (ls), ..."
// and for a command line that stops where a command is required:
//   "'det experiment' needs a command: create, list (ls), ..."
// std::nullopt when every word resolves (CLI11's own message then stands).
std::optional<std::string> DiagnoseCommandWords(CLI::App& app,
                                                const std::vector<std::string>& args);

// The candidate closest to `word` by edit distance (case-insensitive), when it is close
// enough to be a plausible typo (at most 2 edits, or a prefix of at least 2 characters);
// "" otherwise.
std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace det::cli

#endif  // DET_CLI_COMMAND_WORDS_H_
