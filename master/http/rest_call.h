// The REST plumbing of HttpServer (private to master/http): a route bound to a handler
// method, a call's request built from JSON body, query and path, its answer or error as
// JSON. Used by http_server.cc (static files, metrics) and api_routes.cc (/api/v1).
#ifndef DET_MASTER_HTTP_REST_CALL_H_
#define DET_MASTER_HTTP_REST_CALL_H_

#include <httplib.h>

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status/status_macros.h"
#include "google/protobuf/message.h"
#include "master/api/handlers.h"
#include "master/http/query_params.h"

namespace det::master::rest {

// Largest request body (a context directory is at most 64 MiB, base64 in JSON): what
// POST /api/v1/experiments takes.
constexpr size_t kMaxBodyBytes = 128 << 20;
// What every other route takes (a 1 MiB config, JSON-escaped, and more): as gRPC's limit.
constexpr size_t kDefaultMaxBodyBytes = 4 << 20;

// What a route's body may be, checked before the body is read (HttpServer's pre-routing):
// a route that needs a session refuses a body from a caller without one, and no route
// reads more than its max_body.
struct BodyRule {
  std::string method;
  std::regex pattern;  // the whole path
  bool open = false;
  size_t max_body = kDefaultMaxBodyBytes;
};

// The routes served: their names ("POST /api/v1/experiments/{id}/kill", for people and
// docs/rest-api.md) and their body rules.
struct RouteTable {
  std::vector<std::string> names;
  std::vector<BodyRule> bodies;
  void push_back(std::string name) { names.push_back(std::move(name)); }
  // The rule of the route `method` `path` would reach, or null.
  const BodyRule* Find(const std::string& method, const std::string& path) const;
};

// {"code": "NOT_FOUND", "message": "..."} for `status`.
std::string ErrorJson(const absl::Status& status);
// `message` as JSON (proto field names, default values printed).
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);
// The request body as `message`, whatever the Content-Type says (curl -d sends
// application/x-www-form-urlencoded). An error never repeats the body (a password).
absl::Status ParseBody(const std::string& body, google::protobuf::Message* message);
// The parameters of the URL's query string only (httplib also adds those of a form
// body, which here is JSON).
Params QueryParams(const httplib::Request& hreq);
// InvalidArgument for a negative count or list position (limit, offset, ...).
absl::Status CheckNonNegative(const Params& params);
// Waits for the Done of a handler call made by `start`; `keep` (the call's request and
// response) stays alive until Done runs, even when the wait gives up.
absl::Status CallAndWait(const std::shared_ptr<void>& keep,
                         const std::function<void(Done)>& start);
// The token of "Authorization: Bearer TOKEN".
std::string BearerToken(const httplib::Request& req);
// 200 with `body`, or the error's HTTP status with its JSON.
void Reply(httplib::Response& res, const absl::StatusOr<std::string>& body);
// "no route for GET /x (the routes are listed in docs/rest-api.md)".
std::string NoRouteMessage(const httplib::Request& req);
// The status of an error httplib answered by itself with HTTP status `http`.
absl::Status HttpError(const httplib::Request& req, int http);
// "GET /api/v1/trials/{id}" for `method` and the path regex `pattern`.
std::string RouteName(const std::string& method, const std::string& pattern);

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
  // Largest request body it reads.
  size_t max_body = kDefaultMaxBodyBytes;
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

// Serves `route` at `method` `pattern` (a regex over the whole path) on `srv`; adds it
// to `table`.
template <typename Req, typename Resp>
void Register(httplib::Server& srv, RouteTable& table, const std::string& method,
              const std::string& pattern, Route<Req, Resp> route, UserHandler* users) {
  table.push_back(RouteName(method, pattern));
  table.bodies.push_back({method, std::regex(pattern), route.open, route.max_body});
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
  } else if (method == "PATCH") {
    srv.Patch(pattern, handler);
  } else {
    srv.Post(pattern, handler);
  }
}

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

}  // namespace det::master::rest

#endif  // DET_MASTER_HTTP_REST_CALL_H_
