// Every ShardPS method a server answers, served through one generic
// callback service: ParameterService (server/ps_service.h) and the raw
// framing of Push and Pull (server/raw_tensor_service.h). Any other method
// is UNIMPLEMENTED, naming it. Thread-safe; holds only the core pointer.
#ifndef SHARDPS_SERVER_SERVICE_DISPATCHER_H_
#define SHARDPS_SERVER_SERVICE_DISPATCHER_H_

#include <grpcpp/generic/async_generic_service.h>

#include "server/parameter_server.h"

namespace shardps {

class ServiceDispatcher final : public grpc::CallbackGenericService {
 public:
  // `core` must outlive the service.
  explicit ServiceDispatcher(ParameterServer* core) : core_(core) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  ParameterServer* const core_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SERVICE_DISPATCHER_H_
