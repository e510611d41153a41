#include "common/worker/cpp/collective/file_rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace det::collective {
namespace {

bool ValidKey(const std::string& key) {
  if (key.empty() || key.find("..") != std::string::npos || key.front() == '/') return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string partial = path.substr(0, i);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("rendezvous: cannot create directory '", partial, "': ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

FileRendezvous::FileRendezvous(std::string dir, int rank, int size)
    : dir_(std::move(dir)), rank_(rank), size_(size) {}

absl::StatusOr<std::vector<std::string>> FileRendezvous::AllGather(const std::string& key,
                                                                   const std::string& value,
                                                                   absl::Duration timeout) {
  if (!ValidKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key '", key,
                                                   "': use [A-Za-z0-9._-] and '/' only"));
  }
  std::string round = absl::StrCat(dir_, "/", key);
  if (auto st = MakeDirs(round); !st.ok()) return st;
  std::string mine = absl::StrCat(round, "/", rank_);
  std::string tmp = absl::StrCat(mine, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.close();
    if (!out) {
      return absl::PermissionDeniedError(absl::StrCat("rendezvous: cannot write '", tmp, "'"));
    }
  }
  if (rename(tmp.c_str(), mine.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("rendezvous: cannot rename '", tmp, "': ", strerror(errno)));
  }

  std::vector<std::string> values(size_);
  std::vector<bool> have(size_, false);
  int missing = size_;
  absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    for (int r = 0; r < size_; ++r) {
      if (have[r]) continue;
      std::ifstream in(absl::StrCat(round, "/", r), std::ios::binary);
      if (!in) continue;
      std::ostringstream content;
      content << in.rdbuf();
      values[r] = content.str();
      have[r] = true;
      --missing;
    }
    if (missing == 0) return values;
    if (absl::Now() > deadline) {
      std::vector<int> absent;
      for (int r = 0; r < size_; ++r) {
        if (!have[r]) absent.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous '", key, "': rank(s) ", absl::StrJoin(absent, ", "),
                       " did not arrive within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

}  // namespace det::collective
