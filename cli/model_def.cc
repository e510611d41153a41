#include "cli/model_def.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace det::cli {
namespace {

constexpr size_t kBlock = 512;

// Writes `value` as a zero-padded octal number of `width` - 1 digits and a NUL.
void Octal(char* field, size_t width, uint64_t value) {
  std::string digits = absl::StrFormat("%0*o", static_cast<int>(width - 1), value);
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

// One 512-byte header; `type` '0' (a file) or 'L' (a GNU long name for the next entry).
std::string Header(const std::string& name, const std::string& prefix, uint64_t size,
                   uint32_t mode, char type) {
  std::string h(kBlock, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  Octal(&h[100], 8, mode & 07777);
  Octal(&h[108], 8, 0);  // uid
  Octal(&h[116], 8, 0);  // gid
  Octal(&h[124], 12, size);
  Octal(&h[136], 12, 0);  // mtime
  std::memset(&h[148], ' ', 8);
  h[156] = type;
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::string check = absl::StrFormat("%06o", sum);
  std::memcpy(&h[148], check.data(), 6);
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

std::string Padding(uint64_t size) {
  return std::string((kBlock - size % kBlock) % kBlock, '\0');
}

// The header(s) of a file named `path`: ustar's name (+ prefix split at a '/') when it
// fits, else a GNU long-name entry first.
std::string Headers(const std::string& path, uint64_t size, uint32_t mode) {
  if (path.size() <= 100) return Header(path, "", size, mode, '0');
  for (size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (slash <= 155 && path.size() - slash - 1 <= 100 && slash + 1 < path.size()) {
      return Header(path.substr(slash + 1), path.substr(0, slash), size, mode, '0');
    }
  }
  std::string name = path + '\0';
  return Header("././@LongLink", "", name.size(), 0644, 'L') + name + Padding(name.size()) +
         Header(path.substr(0, 100), "", size, mode, '0');
}

}  // namespace

absl::Status WriteTarGz(const std::string& path, const std::vector<v1::ContextFile>& files,
                        const std::string& top_dir) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", path, "' exists; remove it or choose another output"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  gzFile gz = ::gzdopen(fd, "wb");
  if (gz == nullptr) {
    ::close(fd);
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot compress into '", path, "'"));
  }
  bool ok = true;
  auto write = [&](const std::string& bytes) {
    if (!ok || bytes.empty()) return;
    ok = ::gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
         static_cast<int>(bytes.size());
  };
  for (const v1::ContextFile& f : files) {
    const std::string name = top_dir.empty() ? f.path() : absl::StrCat(top_dir, "/", f.path());
    const uint32_t mode = f.mode() != 0 ? f.mode() : 0644;
    write(Headers(name, f.content().size(), mode));
    write(f.content());
    write(Padding(f.content().size()));
  }
  write(std::string(2 * kBlock, '\0'));  // the end of the archive
  const bool closed = ::gzclose(gz) == Z_OK;
  if (!ok || !closed) {
    ::unlink(path.c_str());
    return absl::DataLossError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace det::cli
