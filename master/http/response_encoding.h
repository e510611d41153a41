// How HttpServer encodes what its routes answer (private to master/http): a strong ETag
// and "Cache-Control: no-cache" on every 200 to a GET, 304 with no body when the request's
// If-None-Match names the ETag, and gzip (zlib level 1: the cheapest level; JSON still
// shrinks about 5x) for a body of at least kMinGzipBytes when Accept-Encoding allows it.
// httplib's own compression (which would pick brotli at its slowest setting for a browser,
// and compress bodies that end up as 304) is kept out by HideAcceptEncoding.
#ifndef DET_MASTER_HTTP_RESPONSE_ENCODING_H_
#define DET_MASTER_HTTP_RESPONSE_ENCODING_H_

#include <httplib.h>

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace det::master::rest {

// Bodies below this go uncompressed (gzip's header and the work cost more than they save).
constexpr size_t kMinGzipBytes = 1024;

// Pre-routing: moves the request's Accept-Encoding out of httplib's sight (it compresses
// by it before the post-routing handler runs) to where EncodeResponse finds it.
void HideAcceptEncoding(httplib::Request& req);

// Post-routing, for every answer: ETag / 304 and gzip as above, "Vary: Accept-Encoding"
// on every compressible answer. Leaves streamed answers (no body yet) alone.
void EncodeResponse(const httplib::Request& req, httplib::Response& res);

// The strong ETag of `body` ("\"<32 hex digits>\"", a SHA-256 prefix), with "-gzip" before
// the closing quote for its gzip encoding.
std::string BodyETag(absl::string_view body, bool gzip);

// Whether an If-None-Match header value names `etag` (weakly: W/ and the -gzip suffix
// ignored, as RFC 9110 13.1.2 compares for GET), or is "*".
bool NoneMatchNames(absl::string_view if_none_match, absl::string_view etag);

}  // namespace det::master::rest

#endif  // DET_MASTER_HTTP_RESPONSE_ENCODING_H_
