// Private to the C API's sources (c_api.cc, c_api_rows.cc): the handles
// behind the opaque pointers, and the one place where a status becomes a
// return code and this thread's last error.
#ifndef SHARDPS_CLIENT_C_API_INTERNAL_H_
#define SHARDPS_CLIENT_C_API_INTERNAL_H_

#include <exception>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/c_api.h"
#include "client/ps_client.h"

namespace shardps {

inline thread_local std::string last_error;
inline thread_local int last_code = 0;

struct Client {
  Layout layout;
  absl::flat_hash_map<std::string, int> index;
  std::unique_ptr<PsClient> client;
};

struct Call {
  absl::Notification done;
  absl::Status status;
  PsClient::Done Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};

inline int Result(const absl::Status& s) {
  if (s.ok()) {
    last_error.clear();
    last_code = 0;
    return SHARDPS_OK;
  }
  last_error = std::string(s.message());
  last_code = static_cast<int>(s.code());
  return IsRejoin(s) ? SHARDPS_REJOIN : SHARDPS_ERROR;
}

// Runs `f` (returning absl::Status) and turns its outcome, or an exception,
// into the API's result.
template <typename F>
int Guard(F f) {
  try {
    return Result(f());
  } catch (const std::exception& e) {
    return Result(absl::InternalError(absl::StrCat("ShardPS C API: ", e.what())));
  } catch (...) {
    return Result(absl::InternalError("ShardPS C API: unknown exception"));
  }
}

inline absl::Status NullArgument(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is null"));
}

inline absl::StatusOr<Client*> ClientOf(ShardpsClientHandle h) {
  if (h == nullptr) return NullArgument("the client handle");
  return static_cast<Client*>(h);
}

inline absl::Status Wait(Call& call) {
  call.done.WaitForNotification();
  return call.status;
}

}  // namespace shardps

#endif  // SHARDPS_CLIENT_C_API_INTERNAL_H_
