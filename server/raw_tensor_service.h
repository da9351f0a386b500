// The raw framing of Push and Pull (proto/shardps.proto, "The raw framing")
// through gRPC's generic callback API: requests' payloads are read straight
// from the received slices and pulled weights are sent as slices that own
// the core's snapshot, so no payload passes through a protobuf bytes field.
// Any other method not served by PsService answers UNIMPLEMENTED.
#ifndef SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_
#define SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>

#include "server/parameter_server.h"

namespace shardps {

class RawTensorService final : public grpc::CallbackGenericService {
 public:
  // `core` must outlive the service.
  explicit RawTensorService(ParameterServer* core) : core_(core) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  ParameterServer* const core_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_RAW_TENSOR_SERVICE_H_
