// The schema version every backend of the Store migrates to. SqliteStore and PostgresStore
// each keep a list of migrations of that length (checked at compile time), migration N
// meaning the same change in both: one list of meanings (sqlite_schema.cc's comments), two
// dialects.
#ifndef DET_MASTER_STORE_SCHEMA_VERSION_H_
#define DET_MASTER_STORE_SCHEMA_VERSION_H_

namespace det::master {

inline constexpr int kStoreSchemaVersion = 11;

}  // namespace det::master

#endif  // DET_MASTER_STORE_SCHEMA_VERSION_H_
