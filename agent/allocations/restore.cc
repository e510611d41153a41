#include "agent/allocations/restore.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/launcher/launcher.h"
#include "agent/supervisor/allocation_record.h"
#include "common/logging/logging.h"

namespace det::agent {

std::vector<RestoredAllocation> RestoreAllocations(const std::string& work_dir,
                                                   ProcessLauncher& launcher) {
  std::string run_root = work_dir + "/run";
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(run_root, ec)) {
    if (entry.is_directory(ec)) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<RestoredAllocation> out;
  for (const std::string& run_dir : dirs) {
    absl::StatusOr<AllocationRecord> rec = ReadAllocationRecord(run_dir);
    if (!rec.ok()) {
      Logger("agent")->warn("ignoring {}: {}", run_dir, rec.status().ToString());
      RemoveTree(run_dir);
      continue;
    }
    RestoredAllocation restored;
    std::vector<Allocation::Worker> workers;
    for (const auto& r : rec->launch.ranks()) {
      Allocation::Worker& w = workers.emplace_back();
      w.rank = r;
      for (const WorkerRecord& wr : rec->workers) {
        if (wr.rank != r.rank()) continue;
        w.shipped = {wr.shipped[0], wr.shipped[1]};
        w.exit_reported = wr.exit_reported;
        if (wr.pid > 0) {
          w.process = launcher.Adopt(wr.pid, wr.start_ticks, RankExitPath(run_dir, r.rank()));
        }
      }
      w.exited = w.exit_reported || !w.process;
      if (!w.exited) {
        restored.running.push_back(r.rank());
        bool alive = !w.process->Wait(absl::ZeroDuration()).has_value();
        restored.adopted.push_back(absl::StrCat("rank ", r.rank(), " (pid ", w.process->pid(),
                                                alive ? ", running" : ", exited", ")"));
      }
    }
    Allocation::Stopping stopping;
    stopping.agent_stopping = rec->agent_stopping;
    stopping.killing = rec->killing;
    if (rec->killing) stopping.kill_deadline = absl::FromUnixMillis(rec->kill_deadline_ms);
    std::string id = rec->launch.allocation_id();
    restored.launched_reported = rec->launched_reported;
    restored.allocation = std::make_shared<Allocation>(
        std::move(rec->launch), absl::StrCat(work_dir, "/", SafeName(id)), run_dir,
        std::move(workers), stopping, rec->launched_reported);
    out.push_back(std::move(restored));
  }
  return out;
}

}  // namespace det::agent
