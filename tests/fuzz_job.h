// The job the wire fuzz test (tests/wire_fuzz_test.cc) sends to: two
// in-process servers over real gRPC, every key on both (--replicas=2), a
// dense layout and a sparse table; worker 0 a real client, rank 1 a raw
// session on each server. It builds a good request of each kind for a
// server (which the test then damages), sends any bytes to any method, and
// reads what a worker sees.
#ifndef SHARDPS_TESTS_FUZZ_JOB_H_
#define SHARDPS_TESTS_FUZZ_JOB_H_

#include <grpcpp/generic/generic_stub.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/key_partition.h"
#include "tests/proto_mutator.h"
#include "tests/test_cluster.h"

namespace shardps::testing {

// The payload bytes a raw frame's header declares (a push's chunks, a
// replication's keys and rows), each item's part held to [0, 4096].
size_t DeclaredPayloadBytes(const google::protobuf::Message& header);

class FuzzJob {
 public:
  explicit FuzzJob(Mode mode);
  ~FuzzJob();

  static Layout JobLayout();
  // Good requests for server `s` (rank 1's session there, keys it owns,
  // rows it holds, a replica of its peer's keys, a join as its peer).
  std::unique_ptr<google::protobuf::Message> GoodRegister(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodInit(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodPush(int s, bool framed) const;
  std::unique_ptr<google::protobuf::Message> GoodPull(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodPushRows(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodPullRows(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodHeartbeat(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodAdmin(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodRewind(int s) const;
  std::unique_ptr<google::protobuf::Message> GoodReplicate(int s, bool framed) const;
  std::unique_ptr<google::protobuf::Message> GoodJoin(int s) const;

  // ADMIN_STOP stops a server as SIGTERM does (tests:startup_test): a fuzzed
  // one is sent as ADMIN_STATUS instead.
  static void AvoidStop(google::protobuf::Message* request);
  // A view of the job's servers for the request metadata: a real one (a
  // server failed, joining, live again) or printable damage.
  static std::string FuzzedView(ProtoMutator& mutator);

  // `request` to `method` of server s, with `view` as its server-view
  // metadata when not empty; waits at most `timeout`.
  grpc::Status Call(int s, const std::string& method, const grpc::ByteBuffer& request, absl::Duration timeout,
                    const std::string& view);
  // What worker 0 pulls at step 0, once both backups have acknowledged
  // every update (Settled): every dense weight, then kSnapshotIds' rows. A
  // worker whose session a fuzzed registration replaced connects afresh.
  std::vector<float> Snapshot();
  // Rank 1 registers again with a server whose answer says its session is gone.
  void RenewSessionIfLost();
  // Both servers answer an Admin status.
  bool StillServing() const;
  // Workers 0 and 1 (real clients) push a step of ones, weights and rows,
  // and pull the next: every call succeeds and every value moves (else
  // what failed).
  absl::Status WorkerTrains();

 private:
  static ServerOptions Options(Mode mode);
  // A registered real client of rank `rank`.
  std::unique_ptr<PsClient> Worker(int rank) const;
  wire::JobView View() const;
  uint64_t RegisterRaw(int s);
  // Waits (up to 20 s) until neither server has a key whose newest version
  // its backup has not acknowledged; false if that never comes.
  bool Settled();
  std::vector<float> PullAll(PsClient& worker, int64_t step, absl::Status* status);

  ServerOptions options_;
  TestCluster cluster_;
  KeyMap map_;
  std::unique_ptr<PsClient> worker_;  // rank 0
  std::array<uint64_t, 2> sessions_{};  // rank 1's, per server
  std::array<uint64_t, 2> incarnations_{};
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_FUZZ_JOB_H_
