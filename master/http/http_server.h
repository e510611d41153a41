// The master's HTTP server: the REST API under /api/v1/ (JSON made from the same protobuf
// messages, through the same ApiHandler, as the gRPC API), the web page at /, Prometheus
// metrics at /metrics and /health. Routes and their parameters: docs/rest-api.md.
//
// Each REST call turns the JSON body, query parameters and path parameters into the
// handler's request message, calls the handler and waits (on the HTTP server's own
// thread) for its Done; the response message is written as JSON. A body is read as JSON
// whatever its Content-Type. Every error, unknown routes and unreadable requests
// included, is {"code": "NOT_FOUND", "message": "..."} with the HTTP status of the code,
// and never repeats the request body.
//
// Every 200 to a GET carries a strong ETag and "Cache-Control: no-cache" (browsers then
// revalidate); a matching If-None-Match gets 304 with no body. Bodies of 1 KiB or more are
// gzip-compressed when Accept-Encoding allows it ("Vary: Accept-Encoding").
#ifndef DET_MASTER_HTTP_HTTP_SERVER_H_
#define DET_MASTER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "master/api/handlers.h"
#include "master/http/rest_call.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace det::master {

struct HttpServerOptions {
  // host:port to listen on; port 0 picks a free port. Required.
  std::string listen;
  // PEM certificate chain and private key; both set: HTTPS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Threads serving requests (each waits for its call, long polls included). Default: 32.
  int threads = 32;
};

// The HTTP status for an absl status code (OK -> 200, NOT_FOUND -> 404, ...).
int HttpStatusFor(absl::StatusCode code);

class HttpServer {
 public:
  // Binds options.listen and serves on its own threads. `api` must outlive the server.
  // `users`, when not null, must too: then every route except POST /api/v1/auth/login,
  // GET /health and the web page's static files needs "Authorization: Bearer TOKEN" with
  // a live session token. Fails when the address cannot be bound or the TLS files
  // cannot be read.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           ApiHandler& api,
                                                           UserHandler* users = nullptr);
  // Stop().
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops listening and waits for the requests in progress. Their handler calls must
  // still be able to finish (call before the handlers' loop stops). Idempotent.
  void Stop();

  // host:port bound (a wildcard host reads as 127.0.0.1).
  const std::string& address() const { return address_; }
  // "http" or "https".
  const std::string& scheme() const { return scheme_; }
  // Every route served, as "METHOD /path" with "{id}" (digits) and "{name}" (any text
  // without "/") for path parameters, in the order added; docs/rest-api.md lists them all.
  const std::vector<std::string>& routes() const { return routes_.names; }
  // Requests answered since Start (any route, any status). Thread-safe.
  int64_t requests_served() const { return requests_served_.load(); }

 private:
  HttpServer(ApiHandler& api, UserHandler* users);
  void AddRoutes();

  ApiHandler& api_;
  UserHandler* users_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  std::string scheme_ = "http";
  std::atomic<int64_t> requests_served_{0};
  rest::RouteTable routes_;
};

}  // namespace det::master

#endif  // DET_MASTER_HTTP_HTTP_SERVER_H_
