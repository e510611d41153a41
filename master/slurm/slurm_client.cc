#include "master/slurm/slurm_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/process/run_capture.h"

namespace det::master::slurm {
namespace {

// The tool's stdout, or an error with its stderr.
absl::StatusOr<std::string> Output(const std::vector<std::string>& argv, absl::Duration timeout) {
  auto r = RunAndCapture(argv, CurrentEnvironment(), timeout);
  if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat("Slurm: ", r.status().message()));
  if (!r->exit.ok()) {
    return absl::UnavailableError(absl::StrCat("Slurm: ", argv[0], " failed (", r->exit.ToString(),
                                               "): ", absl::StripAsciiWhitespace(r->err)));
  }
  return std::move(r->out);
}

class CommandSlurmClient : public SlurmClient {
 public:
  CommandSlurmClient(std::string spool_dir, absl::Duration timeout)
      : spool_dir_(std::move(spool_dir)), timeout_(timeout) {}

  absl::StatusOr<std::string> Submit(const std::vector<std::string>& args,
                                     const std::string& script) override {
    if (mkdir(spool_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create the Slurm spool directory '", spool_dir_, "'"));
    }
    const std::string path = absl::StrCat(spool_dir_, "/job-", std::random_device()(), ".sh");
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
    const bool written =
        ::write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
    close(fd);
    absl::StatusOr<std::string> out = absl::InternalError(absl::StrCat("cannot write '", path, "'"));
    if (written) {
      std::vector<std::string> argv = {"sbatch"};
      argv.insert(argv.end(), args.begin(), args.end());
      argv.push_back(path);
      out = Output(argv, timeout_);
    }
    unlink(path.c_str());
    if (!out.ok()) return out.status();
    // --parsable: "ID" or "ID;CLUSTER".
    std::string id(absl::StripAsciiWhitespace(*out));
    id = id.substr(0, id.find(';'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InternalError(absl::StrCat("Slurm: sbatch printed no job id: \"", *out, "\""));
    }
    return id;
  }

  absl::StatusOr<std::vector<JobInfo>> Jobs() override {
    auto out = Output({"squeue", "-h", "--states=all", "-o", kSqueueFormat}, timeout_);
    if (!out.ok()) return out.status();
    return ParseSqueue(*out);
  }

  absl::StatusOr<std::vector<NodeInfo>> Nodes() override {
    auto out = Output({"sinfo", "-h", "-N", "-o", kSinfoFormat}, timeout_);
    if (!out.ok()) return out.status();
    return ParseSinfo(*out);
  }

  absl::Status Signal(const std::string& job_id, const std::string& signal) override {
    return Output({"scancel", "--signal=" + signal, job_id}, timeout_).status();
  }

  absl::Status Cancel(const std::string& job_id) override {
    return Output({"scancel", job_id}, timeout_).status();
  }

 private:
  const std::string spool_dir_;
  const absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<SlurmClient> NewCommandSlurmClient(std::string spool_dir, absl::Duration timeout) {
  return std::make_unique<CommandSlurmClient>(std::move(spool_dir), timeout);
}

}  // namespace det::master::slurm
