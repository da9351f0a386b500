// The gRPC face of a ParameterServer: unpacks protos, calls the core, and
// turns absl::Status into grpc::Status (through common/grpc_status.h).
// Holds no state of its own beyond the core pointer; thread-safe.
#ifndef SHARDPS_SERVER_PS_SERVICE_H_
#define SHARDPS_SERVER_PS_SERVICE_H_

#include "proto/shardps.grpc.pb.h"
#include "server/parameter_server.h"

namespace shardps {

class PsService final : public wire::ParameterService::CallbackService {
 public:
  // `core` must outlive the service.
  explicit PsService(ParameterServer* core) : core_(core) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const wire::RegisterRequest* req,
                                     wire::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* ctx, const wire::InitRequest* req,
                                 wire::InitResponse* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const wire::PushRequest* req,
                                 wire::PushResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const wire::PullRequest* req,
                                 wire::PullResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const wire::HeartbeatRequest* req,
                                      wire::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Admin(grpc::CallbackServerContext* ctx, const wire::AdminRequest* req,
                                  wire::AdminResponse* resp) override;

 private:
  ParameterServer* const core_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVICE_H_
