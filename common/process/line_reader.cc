#include "common/process/line_reader.h"

#include <cassert>

namespace det {
namespace {

std::string_view StripCarriageReturn(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

LineSplitter::LineSplitter(size_t max_line_length) : max_line_length_(max_line_length) {
  assert(max_line_length > 0);
}

void LineSplitter::EmitLine(std::string_view line,
                            absl::FunctionRef<void(std::string_view)> on_line) {
  line = StripCarriageReturn(line);
  while (line.size() > max_line_length_) {
    on_line(line.substr(0, max_line_length_));
    line.remove_prefix(max_line_length_);
  }
  on_line(line);
}

void LineSplitter::Feed(std::string_view bytes,
                        absl::FunctionRef<void(std::string_view line)> on_line) {
  size_t newline;
  while ((newline = bytes.find('\n')) != std::string_view::npos) {
    std::string_view piece = bytes.substr(0, newline);
    bytes.remove_prefix(newline + 1);
    if (buffer_.empty()) {
      EmitLine(piece, on_line);
    } else {
      buffer_.append(piece);
      EmitLine(buffer_, on_line);
      buffer_.clear();
    }
  }
  buffer_.append(bytes);
  // Cut off full pieces of an overlong line, but hold back a '\r' right after a full
  // piece: it may be the start of the "\r\n" ending that piece.
  size_t start = 0;
  while (true) {
    size_t left = buffer_.size() - start;
    if (left <= max_line_length_) break;
    if (left == max_line_length_ + 1 && buffer_.back() == '\r') break;
    on_line(std::string_view(buffer_).substr(start, max_line_length_));
    start += max_line_length_;
  }
  buffer_.erase(0, start);
}

void LineSplitter::Flush(absl::FunctionRef<void(std::string_view line)> on_line) {
  if (buffer_.empty()) return;
  std::string rest;
  rest.swap(buffer_);
  EmitLine(rest, on_line);
}

}  // namespace det
