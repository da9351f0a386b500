// Every ShardPS method a server answers, served through one generic
// callback service: ParameterService (server/ps_service.h) and the raw
// framing of Push and Pull (server/raw_tensor_service.h). Any other method
// is UNIMPLEMENTED, naming it. With a job token, a call that does not carry
// it (common/security.h) is UNAUTHENTICATED, counted and logged, whatever
// its method. With a push priority, the connection a push or a primary's
// Replicate arrives on gets it (common/connection_priority.h), once per
// connection, as does a worker's first-weights lane (PullRequest.first_weights).
// Thread-safe.
#ifndef SHARDPS_SERVER_SERVICE_DISPATCHER_H_
#define SHARDPS_SERVER_SERVICE_DISPATCHER_H_

#include <grpcpp/generic/async_generic_service.h>

#include <functional>
#include <memory>
#include <string>

#include "common/connection_priority.h"
#include "common/tcp_congestion.h"
#include "common/trace.h"
#include "server/parameter_server.h"

namespace shardps {

class ServiceDispatcher final : public grpc::CallbackGenericService {
 public:
  // `core` must outlive the service. An empty `auth_token` admits every
  // call. `stop` (may be empty) serves ADMIN_STOP. `trace` (may be null;
  // must outlive the service) records pushes and pulls. `push_priority`:
  // the SO_PRIORITY of connections that carry pushes or first weights
  // (kKeepSocketPriority: left alone).
  ServiceDispatcher(ParameterServer* core, std::string auth_token, std::function<void()> stop, Trace* trace = nullptr,
                    int push_priority = kKeepSocketPriority)
      : core_(core),
        auth_token_(std::move(auth_token)),
        stop_(std::move(stop)),
        trace_(trace),
        lifted_(push_priority != kKeepSocketPriority ? std::make_unique<ConnectionPriorityMarker>(push_priority)
                                                     : nullptr) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  bool Admitted(grpc::GenericCallbackServerContext* ctx) const;

  ParameterServer* const core_;
  const std::string auth_token_;
  const std::function<void()> stop_;
  Trace* const trace_;
  const std::unique_ptr<ConnectionPriorityMarker> lifted_;  // null: none
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVICE_DISPATCHER_H_
