#include "agent/supervisor/file_tailer.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

namespace det::agent {

FileTailer::FileTailer(std::string path, int64_t offset)
    : path_(std::move(path)), read_offset_(offset) {}

FileTailer::~FileTailer() {
  if (fd_ >= 0) close(fd_);
}

int FileTailer::Poll(bool final, int max_lines,
                     absl::FunctionRef<void(std::string_view line, int64_t end_offset)> on_line) {
  if (fd_ < 0) fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  int lines = 0;
  at_end_ = fd_ < 0;
  auto emit = [&](std::string_view line, int64_t end) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    on_line(line, end);
    ++lines;
  };
  char buf[65536];
  while (fd_ >= 0 && lines < max_lines) {
    ssize_t n = pread(fd_, buf, sizeof(buf), read_offset_);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      at_end_ = true;
      break;
    }
    read_offset_ += n;
    std::string_view chunk(buf, static_cast<size_t>(n));
    // Offset of chunk[0].
    int64_t base = read_offset_ - n;
    size_t start = 0;
    while (start < chunk.size()) {
      size_t nl = chunk.find('\n', start);
      size_t take_until = nl == std::string_view::npos ? chunk.size() : nl;
      // Cut long lines into pieces of kMaxLineLength.
      while (pending_.size() + (take_until - start) >= kMaxLineLength) {
        size_t take = kMaxLineLength - pending_.size();
        pending_.append(chunk.substr(start, take));
        start += take;
        emit(pending_, base + static_cast<int64_t>(start));
        pending_.clear();
        just_cut_ = true;
      }
      if (take_until > start) just_cut_ = false;
      pending_.append(chunk.substr(start, take_until - start));
      start = take_until;
      if (nl == std::string_view::npos) break;
      start = nl + 1;
      // A newline right after a cut piece ends that piece, not an empty line.
      if (!(just_cut_ && pending_.empty())) emit(pending_, base + static_cast<int64_t>(start));
      pending_.clear();
      just_cut_ = false;
    }
  }
  if (final && at_end_ && !pending_.empty()) {
    emit(pending_, read_offset_);
    pending_.clear();
  }
  return lines;
}

}  // namespace det::agent
