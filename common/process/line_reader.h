// Splitting a byte stream (e.g. a child's stdout read in chunks) into lines.
#ifndef DET_COMMON_PROCESS_LINE_READER_H_
#define DET_COMMON_PROCESS_LINE_READER_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace det {

// Incremental line splitter. Lines end at "\n" or "\r\n"; the terminator is not part of
// the line, a lone '\r' elsewhere is. A line longer than `max_line_length` is delivered in
// pieces of exactly `max_line_length` bytes (the last piece shorter), so memory stays
// bounded. The result does not depend on how the stream is cut into Feed() calls.
//
// `on_line` gets a view valid only during the call and must not call back into this
// splitter. Not thread-safe.
class LineSplitter {
 public:
  static constexpr size_t kDefaultMaxLineLength = 64 * 1024;

  // REQUIRES: max_line_length > 0.
  explicit LineSplitter(size_t max_line_length = kDefaultMaxLineLength);

  // Consumes `bytes`, calling `on_line` for each line completed (or piece cut off).
  void Feed(std::string_view bytes, absl::FunctionRef<void(std::string_view line)> on_line);
  // End of stream: delivers the unterminated rest, if any, as a last line (a final '\r'
  // dropped). The splitter is then empty and may be reused.
  void Flush(absl::FunctionRef<void(std::string_view line)> on_line);

  // Bytes held back waiting for the end of their line.
  size_t buffered_size() const { return buffer_.size(); }

 private:
  // Delivers a complete line (terminator removed), cut into pieces if too long.
  void EmitLine(std::string_view line, absl::FunctionRef<void(std::string_view)> on_line);

  const size_t max_line_length_;
  std::string buffer_;  // start of the current, unterminated line
};

}  // namespace det

#endif  // DET_COMMON_PROCESS_LINE_READER_H_
