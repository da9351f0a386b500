#include "common/security.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shardps {
namespace {

// The contents of the file that --`flag` names; FAILED_PRECONDITION naming
// the flag, the path and the reason when it cannot be read.
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read --", flag, "=", path, ": ", std::strerror(errno)));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFlagFile(flag, path);
  if (pem.ok() && pem->find("-----BEGIN") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat("--", flag, "=", path, " holds no PEM block"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& tls) {
  if (tls.cert.empty() && tls.key.empty()) {
    if (tls.mutual) return absl::InvalidArgumentError("--tls_mutual needs --tls_cert, --tls_key and --tls_ca");
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert.empty() || tls.key.empty()) return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  absl::StatusOr<std::string> cert = ReadPem("tls_cert", tls.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("tls_key", tls.key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(tls.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                       : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (tls.mutual) {
    if (tls.ca.empty()) return absl::InvalidArgumentError("--tls_mutual needs --tls_ca to verify clients");
    absl::StatusOr<std::string> ca = ReadPem("tls_ca", tls.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& tls) {
  if (tls.ca.empty()) {
    if (tls.mutual) return absl::InvalidArgumentError("--tls_mutual needs --tls_ca");
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPem("tls_ca", tls.ca);
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (tls.mutual) {
    if (tls.cert.empty() || tls.key.empty()) return absl::InvalidArgumentError("--tls_mutual needs --tls_cert and --tls_key");
    absl::StatusOr<std::string> cert = ReadPem("tls_cert", tls.cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("tls_key", tls.key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::string> ReadAuthToken(const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> contents = ReadFlagFile("auth_token_file", path);
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) return absl::FailedPreconditionError(absl::StrCat("--auth_token_file=", path, " is empty"));
  return token;
}

bool TokenMatches(absl::string_view presented, absl::string_view token) {
  if (token.empty() || !absl::ConsumePrefix(&presented, kBearerPrefix)) return false;
  unsigned char differ = presented.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) differ |= presented[i] ^ token[i % token.size()];
  return differ == 0;
}

}  // namespace shardps
