#include "master/http/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "master/http/prometheus.h"
#include "master/http/query_params.h"
#include "master/http/web_assets.h"

namespace det::master {
namespace {

namespace pb = google::protobuf;


// Longest wait for a handler's answer; long polls are capped well below it.
constexpr absl::Duration kCallTimeout = absl::Seconds(120);
// Longest wait_ms of a followed log request.
constexpr int kMaxLogWaitMs = 30000;
constexpr int kDefaultFollowWaitMs = 20000;
// Largest request body (a context directory is at most 64 MiB, base64 in JSON).
constexpr size_t kMaxBodyBytes = 128 << 20;

// `text` as a JSON string literal.
std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string ErrorJson(const absl::Status& status) {
  return absl::StrCat("{\"code\":", JsonQuote(absl::StatusCodeToString(status.code())),
                      ",\"message\":", JsonQuote(status.message()), "}");
}

absl::StatusOr<std::string> ToJson(const pb::Message& message) {
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto st = pb::util::MessageToJsonString(message, &json, options);
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write ", message.GetTypeName(), " as JSON: ", st.ToString()));
  }
  return json;
}

// Protobuf's JSON parse error without the body it quotes: its first line, with quoted
// text (values from the body) left out.
std::string BodyFreeError(absl::string_view message) {
  absl::string_view first = message.substr(0, message.find('\n'));
  std::string out;
  bool quoted = false;
  for (char c : first) {
    if (c == '"') {
      if (!quoted) out += "\"...\"";
      quoted = !quoted;
    } else if (!quoted) {
      out += c;
    }
  }
  if (out.size() > 200) out = absl::StrCat(out.substr(0, 200), "...");
  return std::string(absl::StripAsciiWhitespace(out));
}

// The request body as `message`, whatever the Content-Type says (curl -d sends
// application/x-www-form-urlencoded). An error never repeats the body (a password).
absl::Status ParseBody(const std::string& body, pb::Message* message) {
  if (absl::StripAsciiWhitespace(body).empty()) return absl::OkStatus();
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto st = pb::util::JsonStringToMessage(body, message, options);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body is not a valid ", message->GetDescriptor()->name(), " in JSON: ",
        BodyFreeError(std::string(st.message()))));
  }
  return absl::OkStatus();
}

// The parameters of the URL's query string only (httplib also adds those of a form
// body, which here is JSON).
Params QueryParams(const httplib::Request& hreq) {
  Params params;
  size_t q = hreq.target.find('?');
  if (q == std::string::npos) return params;
  httplib::Params parsed;
  httplib::detail::parse_query_text(hreq.target.substr(q + 1), parsed);
  for (const auto& [k, v] : parsed) params[k].push_back(v);
  return params;
}

// Query parameters that count or point into a list: never negative.
constexpr const char* kNonNegativeParams[] = {"limit", "offset", "max_points", "after_id",
                                              "wait_ms", "rank"};

absl::Status CheckNonNegative(const Params& params) {
  for (const char* name : kNonNegativeParams) {
    auto it = params.find(name);
    if (it == params.end()) continue;
    for (const std::string& v : it->second) {
      int64_t n = 0;
      if (absl::SimpleAtoi(v, &n) && n < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", name, "': expected a non-negative integer, got \"", v, "\""));
      }
    }
  }
  return absl::OkStatus();
}

// Waits for the Done of a handler call made by `start`; `keep` (the call's request and
// response) stays alive until Done runs, even when the wait gives up.
absl::Status CallAndWait(const std::shared_ptr<void>& keep,
                         const std::function<void(Done)>& start) {
  struct Wait {
    absl::Notification done;
    absl::Status status;
  };
  auto wait = std::make_shared<Wait>();
  start([wait, keep](absl::Status st) {
    wait->status = std::move(st);
    wait->done.Notify();
  });
  if (!wait->done.WaitForNotificationWithTimeout(kCallTimeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the master did not answer within ", absl::FormatDuration(kCallTimeout)));
  }
  return wait->status;
}

std::string BearerToken(const httplib::Request& req) {
  std::string header = req.get_header_value("Authorization");
  absl::string_view v = absl::StripAsciiWhitespace(header);
  if (absl::StartsWithIgnoreCase(v, "bearer ")) v.remove_prefix(7);
  return std::string(absl::StripAsciiWhitespace(v));
}

void Reply(httplib::Response& res, const absl::StatusOr<std::string>& body) {
  if (body.ok()) {
    res.status = 200;
    res.set_content(*body, "application/json");
  } else {
    res.status = HttpStatusFor(body.status().code());
    res.set_content(ErrorJson(body.status()), "application/json");
  }
}

std::string NoRouteMessage(const httplib::Request& req) {
  return absl::StrCat("no route for ", req.method, " ", req.path,
                      " (the routes are listed in docs/rest-api.md)");
}

// The status of an error httplib answered by itself with HTTP status `http`.
absl::Status HttpError(const httplib::Request& req, int http) {
  switch (http) {
    case 404: return absl::NotFoundError(NoRouteMessage(req));
    case 405: return absl::InvalidArgumentError(absl::StrCat("method ", req.method, " is not served"));
    case 413: return absl::ResourceExhaustedError(absl::StrCat(
        "request body larger than ", kMaxBodyBytes >> 20, " MiB"));
    case 414: return absl::InvalidArgumentError("request URI too long");
    case 400: return absl::InvalidArgumentError(absl::StrCat(
        "bad request: ", req.method.empty() ? std::string("unreadable request") :
        absl::StrCat("cannot read ", req.method, " ", req.path,
                     " (a method this server does not serve, or a malformed header or body)")));
    default: return absl::UnknownError(absl::StrCat("HTTP ", http));
  }
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

namespace {

// One REST route bound to a handler method.
template <typename Req, typename Resp>
struct Route {
  // Calls the handler (as `caller`, when users are checked).
  std::function<void(const Caller&, const Req&, Resp*, Done)> call;
  // Names of the request fields the path's regex groups fill, in order.
  std::vector<std::string> path_fields;
  // Consumes parameters that are no request field; may adjust the request.
  std::function<absl::Status(Params&, Req&)> prepare;
  // The response as JSON; default: the message itself.
  std::function<absl::StatusOr<std::string>(const Resp&)> render;
  // Needs no session token.
  bool open = false;
};

// The request, response and caller of one call, shared with its Done.
template <typename Req, typename Resp>
struct CallState {
  Req request;
  Resp response;
  Caller caller;
};


// Runs one REST call of `route`: authenticates (unless the route is open or `users` is
// null), builds the request from body, query and path, calls the handler and renders the
// response.
template <typename Req, typename Resp>
absl::StatusOr<std::string> Handle(const Route<Req, Resp>& route, UserHandler* users,
                                   const httplib::Request& hreq) {
  auto call = std::make_shared<CallState<Req, Resp>>();
  if (users != nullptr && !route.open) {
    std::string token = BearerToken(hreq);
    RETURN_IF_ERROR(CallAndWait(call, [&](Done done) {
      users->Authenticate(token, &call->caller, std::move(done));
    }));
  }
  if (hreq.method != "GET") RETURN_IF_ERROR(ParseBody(hreq.body, &call->request));
  Params params = QueryParams(hreq);
  RETURN_IF_ERROR(CheckNonNegative(params));
  for (size_t i = 0; i < route.path_fields.size() && i + 1 < hreq.matches.size(); ++i) {
    params[route.path_fields[i]] = {hreq.matches[i + 1].str()};
  }
  if (route.prepare) RETURN_IF_ERROR(route.prepare(params, call->request));
  RETURN_IF_ERROR(ApplyParams(params, &call->request));
  RETURN_IF_ERROR(CallAndWait(call, [&](Done done) {
    route.call(call->caller, call->request, &call->response, std::move(done));
  }));
  if (route.render) return route.render(call->response);
  return ToJson(call->response);
}

// "GET /api/v1/trials/{id}" for `method` and the path regex `pattern`.
std::string RouteName(const std::string& method, const std::string& pattern) {
  return absl::StrCat(method, " ",
                      absl::StrReplaceAll(pattern, {{"(\\d+)", "{id}"}, {"([^/]+)", "{name}"}}));
}

// Serves `route` at `method` `pattern` (a regex over the whole path) on `srv`; adds it
// to `table`.
template <typename Req, typename Resp>
void Register(httplib::Server& srv, std::vector<std::string>& table, const std::string& method,
              const std::string& pattern, Route<Req, Resp> route, UserHandler* users) {
  table.push_back(RouteName(method, pattern));
  auto handler = [route = std::move(route), users](const httplib::Request& hreq,
                                                   httplib::Response& hres) {
    Reply(hres, Handle(route, users, hreq));
  };
  if (method == "GET") {
    srv.Get(pattern, handler);
  } else if (method == "PUT") {
    srv.Put(pattern, handler);
  } else if (method == "DELETE") {
    srv.Delete(pattern, handler);
  } else {
    srv.Post(pattern, handler);
  }
}

}  // namespace

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
  int bound = port == 0 ? s->server_->bind_to_any_port(host) : port;
  if (port != 0 && !s->server_->bind_to_port(host, port)) bound = -1;
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on http_listen '", options.listen,
                                               "' (address in use or invalid?)"));
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

namespace {

// A route calling `method` of `handler` (an ApiHandler or a UserHandler) as the caller
// Handle authenticated.
template <typename H, typename Req, typename Resp>
Route<Req, Resp> HandlerRoute(H& handler,
                              void (H::*method)(const Caller&, const Req&, Resp*, Done),
                              std::vector<std::string> path_fields = {}) {
  Route<Req, Resp> r;
  r.call = [&handler, method](const Caller& c, const Req& q, Resp* p, Done d) {
    (handler.*method)(c, q, p, std::move(d));
  };
  r.path_fields = std::move(path_fields);
  return r;
}

// "follow=true" (and "wait_ms") of a logs request: a long poll of at most kMaxLogWaitMs.
absl::Status PrepareLogs(Params& params, v1::GetTrialLogsRequest& req) {
  bool follow = false;
  if (auto f = TakeParam(params, "follow"); f && !absl::SimpleAtob(*f, &follow)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'follow': expected true or false, got \"", *f, "\""));
  }
  int wait_ms = follow ? kDefaultFollowWaitMs : 0;
  if (auto w = TakeParam(params, "wait_ms"); w && !absl::SimpleAtoi(*w, &wait_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter 'wait_ms': expected an integer, got \"", *w, "\""));
  }
  if (wait_ms < 0 || wait_ms > kMaxLogWaitMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter 'wait_ms': expected 0 to ", kMaxLogWaitMs, " (milliseconds), got ", wait_ms));
  }
  req.set_wait_ms(wait_ms);
  return absl::OkStatus();
}

// {"slots": [...]}: every slot of every agent, with its agent's id.
absl::StatusOr<std::string> RenderSlots(const v1::ListAgentsResponse& resp) {
  std::vector<std::string> slots;
  for (const auto& a : resp.agents()) {
    for (v1::Slot slot : a.slots()) {
      slot.set_agent_id(a.id());
      ASSIGN_OR_RETURN(std::string json, ToJson(slot));
      slots.push_back(std::move(json));
    }
  }
  return absl::StrCat("{\"slots\":[", absl::StrJoin(slots, ","), "]}");
}

}  // namespace

void HttpServer::AddRoutes() {
  httplib::Server& srv = *server_;
  UserHandler* users = users_;
  ApiHandler& api = api_;
  const std::string id = "(\\d+)";
  const std::string name = "([^/]+)";

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
  srv.Get("/(index\\.html|app\\.js|charts\\.js|style\\.css)",
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

  const std::string v1 = "/api/v1";
  Register(srv, routes_, "GET", v1 + "/master", HandlerRoute(api, &ApiHandler::GetMasterInfo), users);
  Register(srv, routes_, "GET", v1 + "/master/stats", HandlerRoute(api, &ApiHandler::GetMasterStats), users);

  if (users != nullptr) {
    Route<v1::LoginRequest, v1::LoginResponse> login;
    login.call = [users](const Caller&, const v1::LoginRequest& q, v1::LoginResponse* p,
                         Done d) { users->Login(q, p, std::move(d)); };
    login.open = true;
    Register(srv, routes_, "POST", v1 + "/auth/login", login, users);
    Register(srv, routes_, "POST", v1 + "/auth/logout", HandlerRoute(*users, &UserHandler::Logout), users);
    Register(srv, routes_, "GET", v1 + "/me", HandlerRoute(*users, &UserHandler::WhoAmI), users);
    Register(srv, routes_, "GET", v1 + "/users", HandlerRoute(*users, &UserHandler::ListUsers), users);
    Register(srv, routes_, "POST", v1 + "/users", HandlerRoute(*users, &UserHandler::CreateUser), users);
    Register(srv, routes_, "POST", v1 + "/users/" + name + "/password",
             HandlerRoute(*users, &UserHandler::ChangePassword, {"username"}), users);
  }

  Register(srv, routes_, "GET", v1 + "/experiments", HandlerRoute(api, &ApiHandler::ListExperiments),
           users);
  Register(srv, routes_, "POST", v1 + "/experiments", HandlerRoute(api, &ApiHandler::CreateExperiment),
           users);
  Register(srv, routes_, "GET", v1 + "/experiments/" + id,
           HandlerRoute(api, &ApiHandler::GetExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/kill",
           HandlerRoute(api, &ApiHandler::KillExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/pause",
           HandlerRoute(api, &ApiHandler::PauseExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/activate",
           HandlerRoute(api, &ApiHandler::ActivateExperiment, {"id"}), users);
  Register(srv, routes_, "POST", v1 + "/experiments/" + id + "/slots",
           HandlerRoute(api, &ApiHandler::SetExperimentSlots, {"id"}), users);

  Register(srv, routes_, "GET", v1 + "/experiments/" + id + "/checkpoints",
           HandlerRoute(api, &ApiHandler::ListCheckpoints, {"experiment_id"}), users);

  Register(srv, routes_, "GET", v1 + "/trials/" + id, HandlerRoute(api, &ApiHandler::GetTrial, {"id"}),
           users);
  {
    auto metrics = HandlerRoute(api, &ApiHandler::GetTrialMetrics, {"trial_id"});
    metrics.prepare = [](Params& params, v1::GetTrialMetricsRequest&) {
      auto it = params.find("group");
      if (it == params.end()) return absl::OkStatus();
      for (const std::string& g : it->second) {
        if (g != "training" && g != "validation" && g != "timings") {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter 'group': expected training, validation or timings, got \"", g, "\""));
        }
      }
      return absl::OkStatus();
    };
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/metrics", metrics, users);
  }
  {
    auto timings = HandlerRoute(api, &ApiHandler::GetTrialMetrics, {"trial_id"});
    timings.prepare = [](Params& params, v1::GetTrialMetricsRequest& req) {
      if (params.count("group")) {
        return absl::InvalidArgumentError("parameter 'group': timings are the group \"timings\"");
      }
      req.set_group("timings");
      return absl::OkStatus();
    };
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/timings", timings, users);
  }
  {
    auto logs = HandlerRoute(api, &ApiHandler::GetTrialLogs, {"trial_id"});
    logs.prepare = PrepareLogs;
    Register(srv, routes_, "GET", v1 + "/trials/" + id + "/logs", logs, users);
  }

  Register(srv, routes_, "GET", v1 + "/agents", HandlerRoute(api, &ApiHandler::ListAgents), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/enable",
           HandlerRoute(api, &ApiHandler::EnableAgent, {"agent_id"}), users);
  Register(srv, routes_, "POST", v1 + "/agents/" + name + "/disable",
           HandlerRoute(api, &ApiHandler::DisableAgent, {"agent_id"}), users);
  {
    auto slots = HandlerRoute(api, &ApiHandler::ListAgents);
    slots.render = RenderSlots;
    Register(srv, routes_, "GET", v1 + "/slots", slots, users);
  }

  Register(srv, routes_, "GET", v1 + "/jobs", HandlerRoute(api, &ApiHandler::ListJobs), users);
  Register(srv, routes_, "POST", v1 + "/jobs/" + id + "/priority",
           HandlerRoute(api, &ApiHandler::UpdateJobPriority, {"experiment_id"}), users);
  Register(srv, routes_, "GET", v1 + "/tasks", HandlerRoute(api, &ApiHandler::ListTasks), users);
  Register(srv, routes_, "GET", v1 + "/resource-pools", HandlerRoute(api, &ApiHandler::ListResourcePools),
           users);

  Register(srv, routes_, "GET", v1 + "/templates", HandlerRoute(api, &ApiHandler::ListTemplates), users);
  Register(srv, routes_, "GET", v1 + "/templates/" + name,
           HandlerRoute(api, &ApiHandler::GetTemplate, {"name"}), users);
  for (const char* method : {"PUT", "POST"}) {
    Register(srv, routes_, method, v1 + "/templates/" + name,
             HandlerRoute(api, &ApiHandler::SetTemplate, {"name"}), users);
  }
  Register(srv, routes_, "DELETE", v1 + "/templates/" + name,
           HandlerRoute(api, &ApiHandler::RemoveTemplate, {"name"}), users);

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
  srv.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    if (req.method != "GET" && req.method != "HEAD" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding")) {
      const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
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
