#include "common/rpc/context_upload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace det::rpc {

bool SplitContext(const v1::CreateExperimentRequest& request,
                  const std::function<bool(const v1::CreateExperimentChunk&)>& write) {
  v1::CreateExperimentChunk first;
  v1::CreateExperimentRequest* head = first.mutable_request();
  *head = request;
  head->clear_context();
  int64_t bytes = 0;
  for (const v1::ContextFile& f : request.context()) bytes += f.content().size();
  first.set_context_files(request.context_size());
  first.set_context_bytes(bytes);
  if (!write(first)) return false;
  for (const v1::ContextFile& f : request.context()) {
    const int64_t size = static_cast<int64_t>(f.content().size());
    int64_t offset = 0;
    do {
      const int64_t n = std::min(kMaxContextChunkBytes, size - offset);
      v1::CreateExperimentChunk piece;
      v1::ContextFileChunk* c = piece.mutable_file();
      c->set_path(f.path());
      c->set_mode(f.mode());
      c->set_offset(offset);
      c->set_size(size);
      c->set_content(f.content().substr(offset, n));
      if (!write(piece)) return false;
      offset += n;
    } while (offset < size);
  }
  return true;
}

namespace {

std::string Quoted(const std::string& path) {
  return absl::StrCat("'", absl::CHexEscape(path.substr(0, 200)), path.size() > 200 ? "...'" : "'");
}

}  // namespace

absl::Status ContextAssembler::CheckCurrentComplete() const {
  if (request_.context().empty()) return absl::OkStatus();
  const v1::ContextFile& f = *request_.context().rbegin();
  if (static_cast<int64_t>(f.content().size()) == current_size_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "model context: file ", Quoted(f.path()), ": the upload stopped after ", f.content().size(),
      " of its ", current_size_, " bytes"));
}

absl::Status ContextAssembler::Add(v1::CreateExperimentChunk chunk) {
  using config::kMaxContextBytes;
  using config::kMaxContextFiles;
  if (!started_) {
    if (!chunk.has_request()) {
      return absl::InvalidArgumentError(
          "CreateExperimentStream: the first message must carry the request");
    }
    if (chunk.request().context_size() > 0) {
      return absl::InvalidArgumentError(
          "CreateExperimentStream: the request's context must be empty; files come as pieces");
    }
    if (chunk.context_files() < 0 || chunk.context_files() > kMaxContextFiles) {
      return absl::InvalidArgumentError(absl::StrCat("model context: ", chunk.context_files(),
                                                     " files; at most ", kMaxContextFiles,
                                                     " are accepted"));
    }
    if (chunk.context_bytes() < 0 || chunk.context_bytes() > kMaxContextBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model context: ", chunk.context_bytes(), " bytes; at most ", kMaxContextBytes >> 20,
          " MiB are accepted"));
    }
    started_ = true;
    declared_files_ = chunk.context_files();
    declared_bytes_ = chunk.context_bytes();
    request_ = std::move(*chunk.mutable_request());
    return absl::OkStatus();
  }
  if (!chunk.has_file()) {
    return absl::InvalidArgumentError(
        "CreateExperimentStream: only the first message carries the request");
  }
  v1::ContextFileChunk& piece = *chunk.mutable_file();
  const std::string where = absl::StrCat("model context: file ", Quoted(piece.path()), ": ");
  const int64_t n = static_cast<int64_t>(piece.content().size());
  if (n > kMaxContextChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, "a piece of ", n, " bytes; at most ",
                                                   kMaxContextChunkBytes, " per piece"));
  }
  const bool next_file =
      request_.context().empty() || request_.context().rbegin()->path() != piece.path();
  if (next_file) {
    if (absl::Status st = CheckCurrentComplete(); !st.ok()) return st;
    const int64_t files = request_.context_size() + 1;
    if (files > declared_files_) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "file ", files, " of a context declared to have ", declared_files_,
          files > kMaxContextFiles ? absl::StrCat("; at most ", kMaxContextFiles, " are accepted")
                                   : std::string()));
    }
    if (piece.offset() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "its first piece starts at offset ", piece.offset(), ", not 0"));
    }
    // The path's rules (relative, no '..', no control characters, ...) and its size.
    if (absl::Status st = config::CheckContext({{piece.path(), piece.size()}}); !st.ok()) {
      return st;
    }
    if (!paths_.insert(piece.path()).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "appears twice"));
    }
    announced_bytes_ += piece.size();
    if (announced_bytes_ > declared_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "more than the ", declared_bytes_, " bytes declared for the context",
          announced_bytes_ > kMaxContextBytes
              ? absl::StrCat("; at most ", kMaxContextBytes >> 20, " MiB are accepted")
              : std::string()));
    }
    v1::ContextFile* f = request_.add_context();
    f->set_path(std::move(*piece.mutable_path()));
    f->set_mode(piece.mode());
    f->mutable_content()->reserve(static_cast<size_t>(piece.size()));
    current_size_ = piece.size();
  }
  v1::ContextFile& f = *request_.mutable_context()->rbegin();
  const int64_t have = static_cast<int64_t>(f.content().size());
  if (piece.offset() != have) {
    return absl::InvalidArgumentError(absl::StrCat(where, "a piece at offset ", piece.offset(),
                                                   " after ", have, " bytes"));
  }
  if (piece.size() != current_size_ || have + n > current_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "pieces past its size of ", current_size_, " bytes"));
  }
  f.mutable_content()->append(piece.content());
  received_bytes_ += n;
  return absl::OkStatus();
}

absl::StatusOr<v1::CreateExperimentRequest> ContextAssembler::Finish() {
  if (!started_) {
    return absl::InvalidArgumentError("CreateExperimentStream: the stream carried no request");
  }
  if (absl::Status st = CheckCurrentComplete(); !st.ok()) return st;
  if (request_.context_size() != declared_files_ || received_bytes_ != declared_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model context: the upload stopped after ", request_.context_size(), " of ",
        declared_files_, " files (", received_bytes_, " of ", declared_bytes_, " bytes)"));
  }
  // What only the whole list shows ("a" a file and also the directory of "a/b") is the
  // experiment manager's check of every context, as for the unary call.
  return std::move(request_);
}

}  // namespace det::rpc
