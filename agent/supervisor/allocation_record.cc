#include "agent/supervisor/allocation_record.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace det::agent {

std::string RankOutputPath(const std::string& run_dir, int rank, int stream) {
  return absl::StrCat(run_dir, "/rank-", rank, stream == 0 ? ".stdout" : ".stderr");
}

std::string RankExitPath(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank-", rank, ".exit");
}

std::string RecordPath(const std::string& run_dir) { return run_dir + "/state.json"; }

absl::Status WriteAllocationRecord(const std::string& run_dir, const AllocationRecord& record) {
  std::string launch_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  const v1::LaunchCommand& launch = record.launch;
  if (auto st = google::protobuf::util::MessageToJsonString(launch, &launch_json, opts); !st.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the launch of ", launch.allocation_id()));
  }
  nlohmann::json j;
  j["version"] = 1;
  j["launch"] = nlohmann::json::parse(launch_json, nullptr, /*allow_exceptions=*/false);
  j["launched_reported"] = record.launched_reported;
  j["killing"] = record.killing;
  j["kill_deadline_ms"] = record.kill_deadline_ms;
  j["agent_stopping"] = record.agent_stopping;
  j["workers"] = nlohmann::json::array();
  for (const auto& w : record.workers) {
    j["workers"].push_back({{"rank", w.rank},
                            {"pid", w.pid},
                            {"start_ticks", w.start_ticks},
                            {"stdout_shipped", w.shipped[0]},
                            {"stderr_shipped", w.shipped[1]},
                            {"exit_reported", w.exit_reported}});
  }
  std::string text = j.dump(1);
  std::string path = RecordPath(run_dir);
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", tmp));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int error = errno;
  close(fd);
  if (!ok) return absl::ErrnoToStatus(error, absl::StrCat("cannot write ", tmp));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<AllocationRecord> ReadAllocationRecord(const std::string& run_dir) {
  std::string path = RecordPath(run_dir);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no allocation record ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("allocation record ", path, ": ", what));
  };
  if (!j.is_object() || !j.contains("launch") || !j.contains("workers") ||
      !j["workers"].is_array()) {
    return bad("not a record (malformed JSON or missing launch/workers)");
  }
  AllocationRecord r;
  // nlohmann::json throws on a value of the wrong type: this is the boundary.
  try {
    google::protobuf::util::JsonParseOptions popts;
    popts.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(j["launch"].dump(), &r.launch, popts).ok()) {
      return bad("launch does not parse");
    }
    r.launched_reported = j.value("launched_reported", false);
    r.killing = j.value("killing", false);
    r.kill_deadline_ms = j.value("kill_deadline_ms", int64_t{0});
    r.agent_stopping = j.value("agent_stopping", false);
    for (const auto& w : j["workers"]) {
      if (!w.is_object() || !w.contains("rank")) return bad("worker without rank");
      WorkerRecord& wr = r.workers.emplace_back();
      wr.rank = w.value("rank", 0);
      wr.pid = w.value("pid", 0);
      wr.start_ticks = w.value("start_ticks", uint64_t{0});
      wr.shipped[0] = w.value("stdout_shipped", int64_t{0});
      wr.shipped[1] = w.value("stderr_shipped", int64_t{0});
      wr.exit_reported = w.value("exit_reported", false);
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return r;
}

}  // namespace det::agent
