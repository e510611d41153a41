#include "agent/context_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/launcher/launcher.h"
#include "common/logging/logging.h"
#include "common/rpc/context_sha256.h"

namespace det::agent {
namespace {

// A name that can only be a hash: 64 lowercase hex digits.
bool IsSha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

absl::StatusOr<v1::ModelContext> ContextCache::Get(const v1::ModelContextRef& ref,
                                                   const Fetch& fetch) {
  const std::string what = absl::StrCat("the model context of experiment ", ref.experiment_id());
  const bool cacheable = IsSha256(ref.sha256());
  const std::string path = absl::StrCat(dir_, "/", ref.sha256());
  v1::ModelContext context;
  if (cacheable) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (in && rpc::ContextSha256(bytes.str()) == ref.sha256() &&
        context.ParseFromString(bytes.str())) {
      return context;
    }
  }
  absl::StatusOr<v1::GetModelContextResponse> fetched = fetch();
  if (!fetched.ok()) {
    return absl::Status(fetched.status().code(),
                        absl::StrCat("cannot fetch ", what, ": ", fetched.status().message()));
  }
  if (!ref.sha256().empty() && fetched->sha256() != ref.sha256()) {
    return absl::DataLossError(absl::StrCat("the master sent ", what, " with SHA-256 ",
                                            fetched->sha256(), ", not ", ref.sha256()));
  }
  if (!context.ParseFromString(fetched->model_context())) {
    return absl::DataLossError(absl::StrCat("cannot parse ", what, " the master sent"));
  }
  if (cacheable) {
    if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      Logger("agent")->warn("cannot create {}: {}; contexts are not cached", dir_,
                            strerror(errno));
    } else if (absl::Status kept = WritePrivateFile(path, fetched->model_context()); !kept.ok()) {
      Logger("agent")->warn("cannot cache {}: {}", what, kept.ToString());
    } else {
      Trim();
    }
  }
  return context;
}

void ContextCache::Trim() {
  std::error_code ec;
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
    if (IsSha256(e.path().filename().string())) {
      files.emplace_back(e.last_write_time(ec), e.path());
    }
  }
  if (static_cast<int>(files.size()) <= keep_) return;
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + keep_ < files.size(); ++i) std::filesystem::remove(files[i].second, ec);
}

}  // namespace det::agent
