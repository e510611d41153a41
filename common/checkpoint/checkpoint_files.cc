#include "common/checkpoint/checkpoint_files.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det {

absl::Status CheckReportedCheckpoint(const v1::Checkpoint& c, const std::string& directory) {
  const std::string& uuid = c.uuid();
  if (uuid.empty() || uuid == "." || uuid == ".." || absl::StrContains(uuid, "/")) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint.uuid: '", uuid, "' is not a plain name"));
  }
  if (directory.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", uuid, ": the experiment has no checkpoint_storage"));
  }
  const std::string expected = absl::StrCat(directory, "/", uuid);
  if (c.storage_path() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint.storage_path: '", c.storage_path(),
                                                   "' is not this experiment's checkpoint directory '",
                                                   expected, "'"));
  }
  return absl::OkStatus();
}

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
