// The Store conformance suite (store_conformance.cc) against SqliteStore on a file in
// TEST_TMPDIR and InMemoryStore.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "master/store/in_memory_store.h"
#include "master/store/sqlite_store.h"
#include "master/store/store_conformance.h"

namespace det::master {
namespace {

std::unique_ptr<Store> OpenSqlite() {
  static int serial = 0;
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path =
      absl::StrCat(dir ? dir : "/tmp", "/conformance-", getpid(), "-", ++serial, ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
  auto store = SqliteStore::Open(path);
  if (!store.ok()) {
    ADD_FAILURE() << store.status();
    return nullptr;
  }
  return std::move(*store);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreConformanceTest,
    ::testing::Values(Backend{"Sqlite", OpenSqlite},
                      Backend{"InMemory", [] { return std::make_unique<InMemoryStore>(); }}),
    [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace det::master
