#include "master/http/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging/logging.h"
#include "master/http/api_routes.h"
#include "master/http/prometheus.h"
#include "master/http/response_encoding.h"
#include "master/http/rest_call.h"
#include "master/http/web_assets.h"

namespace det::master {
namespace {

// Connections the kernel queues for HttpServer before it accepts them (capped by
// net.core.somaxconn).
constexpr int kListenBacklog = 1024;

}  // namespace

using rest::ErrorJson;
using rest::HandlerRoute;
using rest::Handle;
using rest::HttpError;
using rest::kMaxBodyBytes;
using rest::NoRouteMessage;
using rest::Reply;
using rest::Route;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              ApiHandler& api,
                                                              UserHandler* users) {
  std::unique_ptr<HttpServer> s(new HttpServer(api, users));
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: give both cert_file and key_file for HTTPS, or neither");
  }
  if (!options.tls_cert_file.empty()) {
    auto ssl = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                                    options.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tls: cannot load certificate '", options.tls_cert_file, "' and key '",
          options.tls_key_file, "' for HTTPS"));
    }
    s->server_ = std::move(ssl);
    s->scheme_ = "https";
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(2, options.threads);
  s->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s->server_->set_payload_max_length(kMaxBodyBytes);
  // One request per connection: a request refused before its body was read (see the
  // pre-routing handler) leaves that body unread, and on a kept-alive connection httplib
  // would parse it as the next request, holding as much of it in memory as was sent.
  s->server_->set_keep_alive_max_count(1);
  s->server_->set_logger([server = s.get()](const httplib::Request& req,
                                           const httplib::Response& res) {
    server->requests_served_.fetch_add(1);
    Logger("http")->debug("{} {} -> {}", req.method, req.path, res.status);
  });
  s->AddRoutes();

  size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_listen: expected host:port, got \"", options.listen, "\""));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  // httplib listens with a backlog of 5 (compiled into Debian's library): 20 readers
  // connecting at once (one request per connection, above) overflow it, and each SYN the
  // kernel drops costs its client a 1 s retransmission. The socket httplib binds is listened
  // on again with kListenBacklog (Linux then only raises the backlog).
  int listen_fd = -1;
  s->server_->set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  int bound = port == 0 ? s->server_->bind_to_any_port(host) : port;
  if (port != 0 && !s->server_->bind_to_port(host, port)) bound = -1;
  s->server_->set_socket_options(httplib::default_socket_options);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on http_listen '", options.listen,
                                               "' (address in use or invalid?)"));
  }
  if (listen_fd < 0 || ::listen(listen_fd, kListenBacklog) != 0) {
    Logger("http")->warn("cannot raise the HTTP listen backlog to {}: bursts of connections "
                         "may wait 1 s each", kListenBacklog);
  }
  std::string shown = host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host;
  if (shown.find(':') != std::string::npos) shown = absl::StrCat("[", shown, "]");
  s->address_ = absl::StrCat(shown, ":", bound);
  auto listen_returned = std::make_shared<std::atomic<bool>>(false);
  s->thread_ = std::thread([srv = s->server_.get(), listen_returned] {
    srv->listen_after_bind();
    listen_returned->store(true);
  });
  // httplib's stop() before its listen loop runs is lost (Stop() would then wait forever):
  // return once the loop runs (or has already ended).
  while (!s->server_->is_running() && !listen_returned->load()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  Logger("http")->info("serving the REST API and the web page on {}://{}", s->scheme_,
                       s->address_);
  return s;
}

HttpServer::HttpServer(ApiHandler& api, UserHandler* users) : api_(api), users_(users) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

void HttpServer::AddRoutes() {
  httplib::Server& srv = *server_;
  UserHandler* users = users_;
  ApiHandler& api = api_;

  routes_.push_back("GET /health");
  srv.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });

  // The web page: static files, no data (the page calls the REST API).
  auto asset = [](const std::string& path, httplib::Response& res) {
    const WebAsset* a = FindWebAsset(path);
    if (a == nullptr) {
      res.status = 404;
      res.set_content(ErrorJson(absl::NotFoundError(absl::StrCat("no file ", path))),
                      "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                   "script-src 'self'; connect-src 'self'; frame-ancestors 'none'");
    res.set_content(std::string(reinterpret_cast<const char*>(a->data), a->size),
                    a->content_type);
  };
  srv.Get("/", [asset](const httplib::Request&, httplib::Response& res) {
    asset("/index.html", res);
  });
  // Any file of web/ by its name (FindWebAsset answers 404 for others).
  srv.Get("/([A-Za-z0-9_-]+\\.(html|js|css|svg))",
          [asset](const httplib::Request& req, httplib::Response& res) { asset(req.path, res); });

  // Prometheus text exposition of GetMasterStats.
  {
    auto r = HandlerRoute(api, &ApiHandler::GetMasterStats);
    auto handler = [r, users, this](const httplib::Request& hreq, httplib::Response& hres) {
      Route<v1::GetMasterStatsRequest, v1::GetMasterStatsResponse> route = r;
      route.render = [this](const v1::GetMasterStatsResponse& stats) {
        return absl::StatusOr<std::string>(PrometheusText(stats, requests_served()));
      };
      absl::StatusOr<std::string> text = Handle(route, users, hreq);
      if (text.ok()) {
        hres.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
      } else {
        Reply(hres, text);
      }
    };
    srv.Get("/metrics", handler);
    srv.Get("/prom/det-state-metrics", handler);
    routes_.push_back("GET /metrics");
    routes_.push_back("GET /prom/det-state-metrics");
  }

  AddApiRoutes(srv, routes_, api, users);

  // Anything else: a JSON 404.
  auto no_route = [](const httplib::Request& req, httplib::Response& res) {
    res.status = 404;
    res.set_content(ErrorJson(absl::NotFoundError(NoRouteMessage(req))), "application/json");
  };
  srv.Get(".*", no_route);
  srv.Post(".*", no_route);
  srv.Put(".*", no_route);
  srv.Patch(".*", no_route);
  srv.Delete(".*", no_route);
  srv.Options(".*", no_route);
  // A request with neither Content-Length nor Transfer-Encoding has an empty body
  // (RFC 9112 6.3; `curl -X POST` sends one); httplib 0.11 answers it 400 unless told the
  // length. The request object httplib passes as const is its own mutable one.
  // Then, before any body is read: a route that needs a session refuses a body from a
  // caller without a valid token, and a body over the route's max_body is refused by its
  // declared length. An unauthenticated request thus costs the master its headers, not its
  // body (issue 25: 32 parallel 120 MB POSTs without a token took the master to 4.27 GB).
  // First of all, Accept-Encoding goes out of httplib's sight: EncodeResponse compresses
  // (after the 304 check), not httplib.
  srv.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    rest::HideAcceptEncoding(const_cast<httplib::Request&>(req));
    if (req.method == "GET" || req.method == "HEAD") return httplib::Server::HandlerResponse::Unhandled;
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
    }
    const rest::BodyRule* rule = routes_.Find(req.method, req.path);
    if (rule == nullptr) return httplib::Server::HandlerResponse::Unhandled;  // 404 below
    size_t length = 0;
    const bool chunked = req.has_header("Transfer-Encoding");
    if (!absl::SimpleAtoi(req.get_header_value("Content-Length"), &length)) length = 0;
    auto refuse = [&](const absl::Status& why) {
      rest::Reply(res, why);
      res.set_header("Connection", "close");  // the unread body must not be parsed as a request
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!rule->open && users_ != nullptr && (length > 0 || chunked)) {
      auto caller = std::make_shared<Caller>();
      absl::Status st = rest::CallAndWait(caller, [&](Done done) {
        users_->Authenticate(rest::BearerToken(req), caller.get(), std::move(done));
      });
      if (!st.ok()) return refuse(st);
    }
    if (length > rule->max_body) {
      refuse(absl::ResourceExhaustedError(absl::StrCat(
          req.method, " ", req.path, " takes a request body of at most ",
          rule->max_body >> 20, " MiB; this one declares ", length, " bytes")));
      res.status = 413;  // Payload Too Large (ResourceExhausted alone reads as 429)
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every answer: ETag, 304, gzip (response_encoding.h).
  srv.set_post_routing_handler(rest::EncodeResponse);
  // Errors httplib answers itself (a request it cannot read, an unknown method, a body
  // too large) get the same JSON shape; answers with a body already are left alone.
  srv.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        res.set_content(ErrorJson(HttpError(req, res.status)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
}

}  // namespace det::master
