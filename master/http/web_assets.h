// The web page's static files (master/http/web/), compiled into the binary by a genrule
// (embed_web.py): nothing is read from disk or the internet at run time.
#ifndef DET_MASTER_HTTP_WEB_ASSETS_H_
#define DET_MASTER_HTTP_WEB_ASSETS_H_

#include <cstddef>
#include <string>

namespace det::master {

struct WebAsset {
  const char* path;          // "/index.html"
  const char* content_type;  // "text/html; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

// The file served at `path`, or null.
const WebAsset* FindWebAsset(const std::string& path);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_WEB_ASSETS_H_
