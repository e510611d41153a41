// Following a file that another process appends to (a worker's stdout or stderr), line by
// line, with the byte offset after each line so that a reader can resume exactly there.
#ifndef DET_AGENT_SUPERVISOR_FILE_TAILER_H_
#define DET_AGENT_SUPERVISOR_FILE_TAILER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace det::agent {

// Not thread-safe.
class FileTailer {
 public:
  // Longer lines are delivered in pieces of this many bytes.
  static constexpr size_t kMaxLineLength = 64 * 1024;

  // Starts reading `path` at byte `offset`. The file may not exist yet.
  FileTailer(std::string path, int64_t offset);
  ~FileTailer();
  FileTailer(const FileTailer&) = delete;
  FileTailer& operator=(const FileTailer&) = delete;

  // Reads what has been appended and calls `on_line(line, end_offset)` for every complete
  // line: terminator ("\n" or "\r\n") removed, `end_offset` the offset just after it. Stops
  // reading once `max_lines` lines were delivered (up to one 64 KiB chunk more). With
  // `final`, an unterminated rest is delivered too once the end is reached (the writer is
  // known to be done). Returns the number of lines delivered.
  int Poll(bool final, int max_lines,
           absl::FunctionRef<void(std::string_view line, int64_t end_offset)> on_line);
  // The last Poll() read to the end of the file (or the file does not exist).
  bool at_end() const { return at_end_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t read_offset_;    // next byte to read
  std::string pending_;    // bytes read of the current unterminated line
  bool just_cut_ = false;  // the last line delivered was a piece of a longer one
  bool at_end_ = false;
};

}  // namespace det::agent

#endif  // DET_AGENT_SUPERVISOR_FILE_TAILER_H_
