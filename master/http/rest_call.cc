#include "master/http/rest_call.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "common/config/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "master/http/http_server.h"

namespace det::master {

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

namespace rest {
namespace {

namespace pb = google::protobuf;

// Longest wait for a handler's answer; long polls are capped well below it.
constexpr absl::Duration kCallTimeout = absl::Seconds(120);

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

}  // namespace

std::string ErrorJson(const absl::Status& status) {
  return absl::StrCat("{\"code\":", config::JsonString(absl::StatusCodeToString(status.code())),
                      ",\"message\":", config::JsonString(status.message()), "}");
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
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

// The request body as `message`, whatever the Content-Type says (curl -d sends
// application/x-www-form-urlencoded). An error never repeats the body (a password).
absl::Status ParseBody(const std::string& body, google::protobuf::Message* message) {
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

const BodyRule* RouteTable::Find(const std::string& method, const std::string& path) const {
  for (const BodyRule& rule : bodies) {
    if (rule.method == method && std::regex_match(path, rule.pattern)) return &rule;
  }
  return nullptr;
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
    case 413:
      // httplib reads a form-encoded body (curl -d without a Content-Type) only up to 8 KiB.
      if (absl::StartsWith(req.get_header_value("Content-Type"),
                           "application/x-www-form-urlencoded")) {
        return absl::ResourceExhaustedError(
            "form-encoded request bodies (curl -d without a Content-Type) are limited to 8 KiB; "
            "send JSON: -H 'Content-Type: application/json'");
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "request body larger than ", kMaxBodyBytes >> 20, " MiB"));
    case 414: return absl::InvalidArgumentError("request URI too long");
    case 400: return absl::InvalidArgumentError(absl::StrCat(
        "bad request: ", req.method.empty() ? std::string("unreadable request") :
        absl::StrCat("cannot read ", req.method, " ", req.path,
                     " (a method this server does not serve, or a malformed header or body)")));
    default: return absl::UnknownError(absl::StrCat("HTTP ", http));
  }
}

// "GET /api/v1/trials/{id}" for `method` and the path regex `pattern`.
std::string RouteName(const std::string& method, const std::string& pattern) {
  return absl::StrCat(method, " ",
                      absl::StrReplaceAll(pattern, {{"(\\d+)", "{id}"}, {"([^/]+)", "{name}"}}));
}

}  // namespace rest
}  // namespace det::master
