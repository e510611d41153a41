// The REST API's routes under /api/v1: each a handler method of ApiHandler or
// UserHandler, with its path parameters and any parameter checks. Listed in
// docs/rest-api.md (http_server_test checks the table against it).
#ifndef DET_MASTER_HTTP_API_ROUTES_H_
#define DET_MASTER_HTTP_API_ROUTES_H_

#include <string>
#include <vector>

#include "master/api/handlers.h"
#include "master/http/rest_call.h"


namespace det::master {

// Serves the /api/v1 routes on `srv` and appends their names ("POST /api/v1/...") to
// `routes`. `users` null: no authentication and no user routes.
void AddApiRoutes(httplib::Server& srv, rest::RouteTable& routes, ApiHandler& api,
                  UserHandler* users);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_API_ROUTES_H_
