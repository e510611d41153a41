// The Store conformance suite (store_conformance.cc) against PostgresStore on a real
// PostgreSQL server started by the test: one server per test process, a fresh database per
// test.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "master/store/postgres_store.h"
#include "master/store/store_conformance.h"
#include "master/store/testing/postgres_server.h"

namespace det::master {
namespace {

// Started by the first test that needs it; stopped when the process exits.
testing::PostgresServer* Server() {
  static testing::PostgresServer* server = [] {
    auto started = testing::PostgresServer::Start();
    if (!started.ok()) {
      ADD_FAILURE() << started.status();
      return static_cast<testing::PostgresServer*>(nullptr);
    }
    return started->release();
  }();
  return server;
}

class StopServer : public ::testing::Environment {
 public:
  void TearDown() override { delete Server(); }
};
const auto* const kStopServer = ::testing::AddGlobalTestEnvironment(new StopServer);

std::unique_ptr<Store> OpenPostgres() {
  static int serial = 0;
  testing::PostgresServer* server = Server();
  if (server == nullptr) return nullptr;
  auto url = server->CreateDatabase(absl::StrCat("conformance_", ++serial));
  if (!url.ok()) {
    ADD_FAILURE() << url.status();
    return nullptr;
  }
  auto store = PostgresStore::Open(*url);
  if (!store.ok()) {
    ADD_FAILURE() << store.status();
    return nullptr;
  }
  return std::move(*store);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformanceTest,
                         ::testing::Values(Backend{"Postgres", OpenPostgres}),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace det::master
