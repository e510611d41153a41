#include "agent/checkpoint_gc/checkpoint_gc.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_files.h"
#include "google/protobuf/util/json_util.h"

namespace det::agent {

std::vector<std::string> CheckpointGcArgv(const std::string& self, const std::string& spec_file) {
  return {self, kCheckpointGcFlag, spec_file};
}

absl::Status WriteCheckpointGcSpec(const std::string& path, const v1::CheckpointGcSpec& spec) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(spec, &json, opts).ok()) {
    return absl::InternalError(absl::StrCat("cannot encode the checkpoint GC spec for ", path));
  }
  std::ofstream f(path, std::ios::trunc);
  f << json << "\n";
  f.close();
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::StatusOr<v1::CheckpointGcSpec> ReadCheckpointGcSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read checkpoint GC spec '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  v1::CheckpointGcSpec spec;
  if (auto st = google::protobuf::util::JsonStringToMessage(ss.str(), &spec); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint GC spec '", path, "': ", st.message().as_string()));
  }
  return spec;
}

absl::Status DeleteCheckpoints(const v1::CheckpointGcSpec& spec, std::ostream& out,
                               std::ostream& err) {
  absl::Status first;
  int failed = 0;
  for (const v1::Checkpoint& c : spec.checkpoints()) {
    absl::Status st = DeleteCheckpointFiles(c, spec.storage_root());
    if (st.ok()) {
      out << "deleted checkpoint " << c.uuid() << " (" << c.storage_path() << ")" << std::endl;
      continue;
    }
    err << st.message() << std::endl;
    if (failed++ == 0) first = st;
  }
  if (failed == 0) return absl::OkStatus();
  return absl::Status(
      first.code(),
      absl::StrCat(first.message(), failed > 1 ? absl::StrCat(" (and ", failed - 1, " more)") : "",
                   "; ", spec.checkpoints_size() - failed, " of ", spec.checkpoints_size(),
                   " checkpoint(s) deleted"));
}

int RunCheckpointGc(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty()) {
    std::cerr << "usage: det-agent " << kCheckpointGcFlag << " SPEC_FILE\n";
    return 2;
  }
  absl::StatusOr<v1::CheckpointGcSpec> spec = ReadCheckpointGcSpec(args[0]);
  if (!spec.ok()) {
    std::cerr << "checkpoint gc: " << spec.status().message() << std::endl;
    return 2;
  }
  absl::Status st = DeleteCheckpoints(*spec, std::cout, std::cerr);
  if (!st.ok()) {
    std::cerr << "checkpoint gc failed: " << st.message() << std::endl;
    return 1;
  }
  std::cout << "checkpoint gc: " << spec->checkpoints_size() << " checkpoint(s) deleted"
            << std::endl;
  return 0;
}

}  // namespace det::agent
