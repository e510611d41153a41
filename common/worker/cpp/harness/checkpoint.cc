#include "common/worker/cpp/harness/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace det::harness {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::PermissionDeniedError(absl::StrCat("checkpoint: cannot ", what, " '", path, "': ", strerror(errno)));
}

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string partial = path.substr(0, i);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return Errno("create directory", partial);
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags);
  if (fd < 0) return Errno("open", path);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return Errno("fsync", path);
  return absl::OkStatus();
}

absl::Status WriteFileSynced(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("create", path);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = Errno("write", path);
      close(fd);
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status st = Errno("fsync", path);
    close(fd);
    return st;
  }
  if (close(fd) != 0) return Errno("close", path);
  return absl::OkStatus();
}

void RemoveTree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d != nullptr) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string child = path + "/" + name;
      struct stat st;
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(child);
      } else {
        unlink(child.c_str());
      }
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

}  // namespace

std::string NewCheckpointUuid() {
  std::random_device rd;
  uint64_t a = (static_cast<uint64_t>(rd()) << 32) | rd();
  uint64_t b = (static_cast<uint64_t>(rd()) << 32) | rd();
  return absl::StrFormat("%08x-%04x-4%03x-%04x-%012x", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                         0x8000 | ((b >> 48) & 0x3fff), b & 0xffffffffffffULL);
}

absl::StatusOr<v1::Checkpoint> WriteCheckpoint(const std::string& dir, const std::string& uuid,
                                               const std::map<std::string, std::string>& files) {
  if (!PlainName(uuid)) return absl::InvalidArgumentError(absl::StrCat("checkpoint uuid '", uuid, "' is not a plain name"));
  if (auto st = MakeDirs(dir); !st.ok()) return st;
  const std::string tmp = absl::StrCat(dir, "/.", uuid, ".tmp");
  const std::string final_path = absl::StrCat(dir, "/", uuid);
  RemoveTree(tmp);  // Left by an earlier attempt that crashed.
  // Private to the trial's OS user: 0700, its files 0600.
  if (mkdir(tmp.c_str(), 0700) != 0) return Errno("create directory", tmp);
  v1::Checkpoint out;
  absl::Status st;
  for (const auto& [name, data] : files) {
    if (!PlainName(name)) {
      st = absl::InvalidArgumentError(absl::StrCat("checkpoint file name '", name, "' is not a plain name"));
      break;
    }
    st = WriteFileSynced(absl::StrCat(tmp, "/", name), data);
    if (!st.ok()) break;
    (*out.mutable_resources())[name] = static_cast<int64_t>(data.size());
  }
  if (st.ok()) st = FsyncPath(tmp, O_RDONLY | O_DIRECTORY);
  if (st.ok() && rename(tmp.c_str(), final_path.c_str()) != 0) st = Errno("rename to", final_path);
  if (!st.ok()) {
    RemoveTree(tmp);
    return st;
  }
  // A storage root the trial's user may add to but not read (cluster-up's 01733 with a task
  // user) cannot be opened to sync; the rename is then as durable as the filesystem makes it.
  if (access(dir.c_str(), R_OK) == 0) {
    if (auto s = FsyncPath(dir, O_RDONLY | O_DIRECTORY); !s.ok()) return s;
  }
  out.set_uuid(uuid);
  out.set_storage_path(final_path);
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ReadCheckpoint(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("checkpoint '", path, "' does not exist"));
    return Errno("open directory", path);
  }
  std::map<std::string, std::string> out;
  absl::Status st;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string file = path + "/" + name;
    FILE* f = fopen(file.c_str(), "rb");
    if (f == nullptr) {
      st = Errno("read", file);
      break;
    }
    std::string data;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
      st = Errno("read", file);
      break;
    }
    out[name] = std::move(data);
  }
  closedir(d);
  if (!st.ok()) return st;
  return out;
}

std::string SerializeTrainingState(const TrainingState& s) {
  nlohmann::json j = {
      {"version", 1},
      {"total_batches", s.total_batches},
      {"epoch", s.epoch},
      {"samples_in_epoch", s.samples_in_epoch},
      {"global_batch_size", s.global_batch_size},
      {"order_algorithm", s.order_algorithm},
      {"dataset_fingerprint", absl::StrFormat("%016x", s.dataset_fingerprint)},
      {"dataset_size", s.dataset_size},
      {"trial_seed", s.trial_seed},
      {"world_size", s.world_size},
      {"rng_states", s.rng_states},
      {"extra", s.extra},
  };
  return j.dump(2);
}

absl::StatusOr<TrainingState> ParseTrainingState(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::DataLossError("checkpoint state.json is not a JSON object");
  if (j.value("version", 0) != 1) {
    return absl::DataLossError(absl::StrCat("checkpoint state.json: version ", j.value("version", 0), " is not 1"));
  }
  TrainingState s;
  auto num = [&](const char* key, auto* out) -> absl::Status {
    if (!j.contains(key) || !j[key].is_number_integer()) {
      return absl::DataLossError(absl::StrCat("checkpoint state.json: ", key, ": expected an integer"));
    }
    *out = j[key].get<std::remove_pointer_t<decltype(out)>>();
    return absl::OkStatus();
  };
  for (auto st : {num("total_batches", &s.total_batches), num("epoch", &s.epoch),
                  num("samples_in_epoch", &s.samples_in_epoch), num("global_batch_size", &s.global_batch_size),
                  num("dataset_size", &s.dataset_size), num("trial_seed", &s.trial_seed),
                  num("world_size", &s.world_size)}) {
    if (!st.ok()) return st;
  }
  if (!j.contains("order_algorithm") || !j["order_algorithm"].is_string() ||
      !j.contains("dataset_fingerprint") || !j["dataset_fingerprint"].is_string()) {
    return absl::DataLossError("checkpoint state.json: order_algorithm and dataset_fingerprint must be strings");
  }
  s.order_algorithm = j["order_algorithm"].get<std::string>();
  s.dataset_fingerprint = std::strtoull(j["dataset_fingerprint"].get<std::string>().c_str(), nullptr, 16);
  if (j.contains("rng_states") && j["rng_states"].is_array()) {
    for (const auto& r : j["rng_states"]) {
      if (!r.is_string()) return absl::DataLossError("checkpoint state.json: rng_states: expected strings");
      s.rng_states.push_back(r.get<std::string>());
    }
  }
  if (j.contains("extra") && j["extra"].is_object()) s.extra = j["extra"];
  return s;
}

}  // namespace det::harness
