#include "common/checkpoint/checkpoint_files.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det {

absl::Status CheckCheckpointPath(const v1::Checkpoint& c) {
  const std::string& path = c.storage_path();
  if (c.uuid().empty() || path.empty() || path[0] != '/' || !absl::EndsWith(path, "/" + c.uuid()) ||
      absl::StrContains(path, "/../")) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", c.uuid(),
                                                   ": refusing to delete storage path '", path,
                                                   "' (not an absolute path ending in the uuid)"));
  }
  return absl::OkStatus();
}

absl::Status DeleteCheckpointFiles(const v1::Checkpoint& c) {
  if (absl::Status st = CheckCheckpointPath(c); !st.ok()) return st;
  std::error_code ec;
  std::filesystem::remove_all(c.storage_path(), ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("checkpoint ", c.uuid(), ": cannot delete '",
                                                    c.storage_path(), "': ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace det
