#include "common/rpc/context_sha256.h"

#include <sodium.h>

#include "absl/strings/escaping.h"

namespace det::rpc {

std::string ContextSha256(absl::string_view serialized_context) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(serialized_context.data()),
                     serialized_context.size());
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

}  // namespace det::rpc
