#include "agent/launcher/launcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace det::agent {
namespace {

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create directory '", partial, "': ", strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string SafeName(const std::string& id) {
  std::string out;
  for (char c : id) out.push_back(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_');
  return out.empty() || out[0] == '.' ? "_" + out : out;
}

EnvironmentVariables WorkerEnvironment(const v1::LaunchCommand& launch,
                                       const v1::RankPlacement& rank, const LaunchContext& ctx,
                                       const EnvironmentVariables& base) {
  EnvironmentVariables overrides;
  for (const auto& [k, v] : launch.env()) overrides.emplace_back(k, v);
  int local_world = 0;
  for (const auto& r : launch.ranks()) local_world += r.agent_id() == rank.agent_id();
  std::string slots = absl::StrJoin(rank.slot_ids(), ",");
  std::string path;
  for (const auto& dir : ctx.worker_path) absl::StrAppend(&path, dir, ":");
  for (const auto& [k, v] : base) {
    if (k == "PATH") absl::StrAppend(&path, v);
  }
  if (path.empty() || path.back() == ':') absl::StrAppend(&path, "/usr/local/bin:/usr/bin:/bin");
  overrides.insert(overrides.end(), {
      {"RANK", absl::StrCat(rank.rank())},
      {"WORLD_SIZE", absl::StrCat(launch.world_size())},
      {"LOCAL_RANK", absl::StrCat(rank.local_rank())},
      {"LOCAL_WORLD_SIZE", absl::StrCat(local_world)},
      {"CROSS_RANK", absl::StrCat(launch.agent_rank())},
      {"CROSS_SIZE", absl::StrCat(launch.num_agents())},
      {"DET_MASTER", ctx.master_address},
      {"DET_AGENT_ID", ctx.agent_id},
      {"DET_SLOT_IDS", slots},
      {"DET_SLOT_TYPE", ctx.slot_type},
      // CPU workers see no GPU; GPU workers see exactly their slots.
      {"CUDA_VISIBLE_DEVICES", ctx.slot_type == "cuda" ? slots : ""},
      {"PATH", path},
  });
  EnvironmentVariables clean;
  for (const auto& kv : base) {
    if (kv.first != "DET_CLUSTER_SECRET") clean.push_back(kv);
  }
  return MergeEnvironment(std::move(clean), overrides);
}

absl::Status WriteContext(const std::string& dir,
                          const google::protobuf::RepeatedPtrField<v1::ContextFile>& files) {
  if (auto st = MakeDirs(dir); !st.ok()) return st;
  for (const auto& f : files) {
    std::vector<std::string> parts = absl::StrSplit(f.path(), '/', absl::SkipEmpty());
    bool bad = f.path().empty() || f.path()[0] == '/' || parts.empty();
    for (const auto& p : parts) bad |= p == ".." || p == ".";
    if (bad) {
      return absl::InvalidArgumentError(
          absl::StrCat("context file '", f.path(), "': path must be relative and inside the context"));
    }
    std::string path = absl::StrCat(dir, "/", absl::StrJoin(parts, "/"));
    std::string parent = path.substr(0, path.rfind('/'));
    if (auto st = MakeDirs(parent); !st.ok()) return st;
    mode_t mode = (f.mode() & 0777) ? (f.mode() & 0777) : 0644;
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode | S_IWUSR);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", strerror(errno)));
    const std::string& data = f.content();
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = write(fd, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fd);
        return absl::ResourceExhaustedError(absl::StrCat("cannot write '", path, "': ", strerror(errno)));
      }
      off += n;
    }
    close(fd);
  }
  return absl::OkStatus();
}

}  // namespace det::agent
