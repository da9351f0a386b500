// Security of a job's channels (DESIGN.md, "Security"): TLS on every channel
// (--tls_cert, --tls_key, --tls_ca; --tls_mutual for client certificates),
// and a job token (--auth_token_file) that every call carries in its
// `authorization: Bearer <token>` metadata and every server checks.
#ifndef SHARDPS_COMMON_SECURITY_H_
#define SHARDPS_COMMON_SECURITY_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

// Paths of PEM files. Empty cert and key: no TLS.
struct TlsFiles {
  std::string cert;  // this process's certificate (chain)
  std::string key;   // its private key
  std::string ca;    // the CA that signs the job's certificates
  bool mutual = false;  // servers require, and clients present, a certificate signed by `ca`
};

// Metadata key and value prefix of the job token.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// Insecure credentials without cert and key; TLS otherwise (with `ca`
// verifying clients when mutual). FAILED_PRECONDITION naming the file and the
// reason when a file cannot be read; INVALID_ARGUMENT for an incomplete set.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& tls);
// Insecure without `ca`; else TLS verifying servers with `ca`, presenting
// cert and key when mutual.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& tls);

// The token in `path` (surrounding whitespace removed). Empty path: no token.
// FAILED_PRECONDITION naming the path when it cannot be read or is empty.
absl::StatusOr<std::string> ReadAuthToken(const std::string& path);

// True when `presented` (the whole metadata value) carries `token`; compares
// in time independent of where they differ.
bool TokenMatches(absl::string_view presented, absl::string_view token);

}  // namespace shardps

#endif  // SHARDPS_COMMON_SECURITY_H_
