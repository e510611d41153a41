#include "master/http/response_encoding.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace det::master::rest {
namespace {

// Where HideAcceptEncoding puts the request's Accept-Encoding.
constexpr char kHiddenAcceptEncoding[] = "X-Det-Accept-Encoding";
constexpr char kGzipSuffix[] = "-gzip";

bool Compressible(absl::string_view type) {
  type = type.substr(0, type.find(';'));
  if (absl::StartsWith(type, "text/")) return type != "text/event-stream";
  return type == "application/json" || type == "application/javascript" ||
         type == "image/svg+xml";
}

// Whether Accept-Encoding `value` takes gzip: "gzip" (or "x-gzip", or "*" when gzip is not
// named) with a q-value above 0.
bool AcceptsGzip(absl::string_view value) {
  bool star = false;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&p, "q=") || absl::ConsumePrefix(&p, "Q=")) {
        if (!absl::SimpleAtod(p, &q)) q = 0;
      }
    }
    if (coding == "gzip" || coding == "x-gzip") return q > 0;
    if (coding == "*") star = q > 0;
  }
  return star;
}

// `body` gzip-compressed at level 1, or false when zlib fails.
bool Gzip(const std::string& body, std::string* out) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return false;
  }
  out->resize(deflateBound(&z, body.size()));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  z.next_out = reinterpret_cast<Bytef*>(out->data());
  z.avail_out = static_cast<uInt>(out->size());
  const int rc = deflate(&z, Z_FINISH);
  out->resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END;
}

void SetHeader(httplib::Response& res, const std::string& name, const std::string& value) {
  res.headers.erase(name);
  res.set_header(name, value);
}

}  // namespace

void HideAcceptEncoding(httplib::Request& req) {
  req.headers.erase(kHiddenAcceptEncoding);
  std::string accepted;
  auto [begin, end] = req.headers.equal_range("Accept-Encoding");
  for (auto it = begin; it != end; ++it) {
    if (!accepted.empty()) accepted += ",";
    accepted += it->second;
  }
  req.headers.erase("Accept-Encoding");
  if (!accepted.empty()) req.headers.emplace(kHiddenAcceptEncoding, accepted);
}

std::string BodyETag(absl::string_view body, bool gzip) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(body.data(), body.size(), digest, &size, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string tag = "\"";
  for (unsigned int i = 0; i < 16 && i < size; ++i) {
    tag += kHex[digest[i] >> 4];
    tag += kHex[digest[i] & 15];
  }
  if (gzip) tag += kGzipSuffix;
  return tag + "\"";
}

bool NoneMatchNames(absl::string_view if_none_match, absl::string_view etag) {
  // The tag without W/ and without the -gzip before its closing quote.
  auto opaque = [](absl::string_view tag) {
    tag = absl::StripAsciiWhitespace(tag);
    absl::ConsumePrefix(&tag, "W/");
    std::string t(tag);
    const std::string suffix = absl::StrCat(kGzipSuffix, "\"");
    if (absl::EndsWith(t, suffix)) t.erase(t.size() - suffix.size(), suffix.size() - 1);
    return t;
  };
  const std::string want = opaque(etag);
  for (absl::string_view tag : absl::StrSplit(if_none_match, ',', absl::SkipWhitespace())) {
    if (absl::StripAsciiWhitespace(tag) == "*" || opaque(tag) == want) return true;
  }
  return false;
}

void EncodeResponse(const httplib::Request& req, httplib::Response& res) {
  if (res.body.empty() || !Compressible(res.get_header_value("Content-Type"))) return;
  res.set_header("Vary", "Accept-Encoding");
  const bool gzip = res.body.size() >= kMinGzipBytes &&
                    AcceptsGzip(req.get_header_value(kHiddenAcceptEncoding));
  if ((req.method == "GET" || req.method == "HEAD") && res.status == 200) {
    const std::string etag = BodyETag(res.body, gzip);
    SetHeader(res, "ETag", etag);
    if (!res.has_header("Cache-Control")) res.set_header("Cache-Control", "no-cache");
    if (req.has_header("If-None-Match") &&
        NoneMatchNames(req.get_header_value("If-None-Match"), etag)) {
      res.status = 304;
      res.body.clear();
      res.headers.erase("Content-Length");
      res.headers.erase("Content-Type");
      return;
    }
  }
  std::string compressed;
  if (!gzip || !Gzip(res.body, &compressed)) return;
  res.body.swap(compressed);
  SetHeader(res, "Content-Encoding", "gzip");
  SetHeader(res, "Content-Length", std::to_string(res.body.size()));
}

}  // namespace det::master::rest
