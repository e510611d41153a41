#include "cli/command_words.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace det::cli {
namespace {

// Levenshtein distance of two short words.
int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<CLI::App*> Subcommands(CLI::App& app) {
  return app.get_subcommands([](CLI::App* sub) { return !sub->get_name().empty(); });
}

// "det experiment" for the experiment group.
std::string CommandPath(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) names.push_back(a->get_name());
  std::reverse(names.begin(), names.end());
  return absl::StrJoin(names, " ");
}

// "create, list (ls), list-trials (lt)".
std::string CommandList(CLI::App& app) {
  std::vector<std::string> items;
  for (CLI::App* sub : Subcommands(app)) {
    std::string item = sub->get_name();
    if (!sub->get_aliases().empty()) {
      absl::StrAppend(&item, " (", absl::StrJoin(sub->get_aliases(), ", "), ")");
    }
    items.push_back(std::move(item));
  }
  return absl::StrJoin(items, ", ");
}

CLI::App* FindSubcommand(CLI::App& app, const std::string& word) {
  for (CLI::App* sub : Subcommands(app)) {
    if (sub->check_name(word)) return sub;
  }
  return nullptr;
}

// The option `flag` ("--json", "-m", "--master=x") of `app` or of an ancestor.
const CLI::Option* FindOption(CLI::App& app, const std::string& flag) {
  std::string name = flag.substr(0, flag.find('='));
  for (CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    if (const CLI::Option* option = a->get_option_no_throw(name)) return option;
  }
  return nullptr;
}

}  // namespace

std::string NearestWord(std::string_view word, const std::vector<std::string>& candidates) {
  std::string lower = absl::AsciiStrToLower(std::string(word));
  std::string best;
  int best_distance = 3;
  for (const std::string& candidate : candidates) {
    int distance = EditDistance(lower, candidate);
    if (lower.size() >= 2 && absl::StartsWith(candidate, lower)) distance = std::min(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  // Two edits of a two-letter word can turn it into anything.
  if (best_distance >= static_cast<int>(lower.size())) return "";
  return best;
}

std::optional<std::string> DiagnoseCommandWords(CLI::App& app,
                                                const std::vector<std::string>& args) {
  CLI::App* current = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.size() > 1 && arg[0] == '-') {
      if (arg == "-h" || arg == "--help") return std::nullopt;
      const CLI::Option* option = FindOption(*current, arg);
      if (option != nullptr && option->get_items_expected_min() > 0 &&
          arg.find('=') == std::string::npos) {
        ++i;  // its value
      }
      continue;
    }
    if (Subcommands(*current).empty()) return std::nullopt;  // a positional argument
    if (CLI::App* sub = FindSubcommand(*current, arg)) {
      current = sub;
      continue;
    }
    std::vector<std::string> names;
    for (CLI::App* sub : Subcommands(*current)) {
      names.push_back(sub->get_name());
      for (const std::string& alias : sub->get_aliases()) names.push_back(alias);
    }
    std::string message =
        absl::StrCat("unknown command '", arg, "' for '", CommandPath(*current), "'");
    std::string nearest = NearestWord(arg, names);
    if (!nearest.empty()) absl::StrAppend(&message, "; did you mean '", nearest, "'?");
    absl::StrAppend(&message, "\ncommands: ", CommandList(*current));
    return message;
  }
  if (current->get_require_subcommand_min() > 0) {
    return absl::StrCat("'", CommandPath(*current), "' needs a command: ", CommandList(*current),
                        "\n(add --help for what each does)");
  }
  return std::nullopt;
}

}  // namespace det::cli
