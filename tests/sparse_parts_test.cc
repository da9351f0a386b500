// Several tables' rows in one request per server (PsClient's
// PushRowsManyAsync and PullRowsManyAsync over real gRPC): every table's
// step completes on every server from one request each, the rows are exact,
// and requests split between tables past the message limit.
#include <catch2/catch.hpp>

#include <vector>

#include "client/pending_call.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

TableSpec Table(const char* name, int dim) {
  TableSpec t;
  t.name = name;
  t.dim = dim;
  t.init_scale = 0;
  t.optimizer = RowOptimizerKind::kSgd;
  t.lr = 1.0f;
  return t;
}

Layout TwoTables() {
  Layout l = SmallLayout();
  l.tables = {Table("users", 2), Table("items", 3)};
  return l;
}

struct Job {
  explicit Job(int64_t max_message_bytes = 0, const Layout& layout = TwoTables(),
               const ServerOptions& options = SyncOptions(2, 2))
      : cluster(options) {
    for (int r = 0; r < 2; ++r) {
      ClientOptions o = cluster.ClientFor(r, layout);
      if (max_message_bytes > 0) o.max_message_bytes = max_message_bytes;
      workers.push_back(cluster.Worker(o));
    }
    REQUIRE(workers[0]->Init(Zeros(layout)).ok());
  }
  absl::Status Push(int rank, int64_t step, std::vector<PsClient::Rows<const float>> tables) {
    PendingCall call;
    workers[rank]->PushRowsManyAsync(step, std::move(tables), call.Callback());
    call.done.WaitForNotification();
    return call.status;
  }
  absl::Status Pull(int rank, int64_t step, std::vector<PsClient::Rows<float>> tables) {
    PendingCall call;
    workers[rank]->PullRowsManyAsync(step, std::move(tables), call.Callback());
    call.done.WaitForNotification();
    return call.status;
  }
  int64_t Requests() {  // pushes and pulls the servers answered, all tables counted once per request
    int64_t n = 0;
    for (int s = 0; s < 2; ++s) n += cluster.core(s)->Stats().pushes + cluster.core(s)->Stats().pulls;
    return n;
  }
  TestCluster cluster;
  std::vector<std::unique_ptr<PsClient>> workers;
};

TEST_CASE("several tables, one request per server: every table's sync step completes, rows exact", "[sparse]") {
  Job job;
  const int64_t before = job.Requests();
  const std::vector<int64_t> users0 = {1, 2, 1}, users1 = {2}, items1 = {7, 8};
  const std::vector<float> gu0 = {1, 1, 2, 2, 3, 3}, gu1 = {4, 4}, gi1 = {1, 2, 3, 4, 5, 6};
  // Worker 0 touches no item: its push still completes the items' step.
  REQUIRE(job.Push(0, 0, {{0, users0.data(), 3, gu0.data()}, {1, nullptr, 0, nullptr}}).ok());
  REQUIRE(job.Push(1, 0, {{0, users1.data(), 1, gu1.data()}, {1, items1.data(), 2, gi1.data()}}).ok());
  CHECK(job.Requests() - before == 4);  // one request per worker and server, not one per table
  const std::vector<int64_t> users = {2, 1, 5}, items = {8, 7};
  std::vector<float> u(6, -99), i(6, -99);
  REQUIRE(job.Pull(1, 1, {{0, users.data(), 3, u.data()}, {1, items.data(), 2, i.data()}}).ok());
  // Sums over the workers divided by the 2 pushes.
  CHECK(u == std::vector<float>{-3, -3, -2, -2, 0, 0});
  CHECK(i == std::vector<float>{-2, -2.5f, -3, -0.5f, -1, -1.5f});
  for (int s = 0; s < 2; ++s) {
    for (const SparseTableStats& t : job.cluster.core(s)->Stats().tables) CHECK(t.version == 1);
  }
  // The one-table calls read the same rows.
  std::vector<float> alone(6, -99);
  REQUIRE(job.workers[0]->PullRows(1, 1, items.data(), 2, alone.data()).ok());
  CHECK(alone == i);
}

TEST_CASE("several tables past the message limit: split between tables, rows still exact", "[sparse]") {
  Job job(1 << 20);  // 1 MB: each table's 30,000 rows a server fit, the two together do not
  std::vector<int64_t> ids(60000);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>(k);
  const std::vector<float> gu(ids.size() * 2, 2.0f), gi(ids.size() * 3, 4.0f);
  const int64_t before = job.Requests();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(job.Push(r, 0, {{0, ids.data(), ids.size(), gu.data()}, {1, ids.data(), ids.size(), gi.data()}}).ok());
  }
  CHECK(job.Requests() - before == 8);  // two requests per worker and server
  std::vector<float> u(ids.size() * 2), i(ids.size() * 3);
  REQUIRE(job.Pull(0, 1, {{0, ids.data(), ids.size(), u.data()}, {1, ids.data(), ids.size(), i.data()}}).ok());
  CHECK(u == std::vector<float>(u.size(), -2.0f));
  CHECK(i == std::vector<float>(i.size(), -4.0f));
}

TEST_CASE("async with replicas: a table's push over the message limit is refused whole, not split", "[sparse]") {
  // The server of a replicated job takes a second request of one step for
  // one sent again after a failover and drops it: a split push would lose
  // its later pieces without a word.
  ServerOptions options = SyncOptions(2, 2);
  options.job.mode = Mode::kAsync;
  options.job.replicas = 2;
  Job job(1 << 20, TwoTables(), options);
  std::vector<int64_t> ids(200000);  // 100,000 rows of 16 bytes a server: over 1 MB
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>(k);
  const std::vector<float> g(ids.size() * 2, 1.0f);
  const absl::Status big = job.Push(0, 0, {{0, ids.data(), ids.size(), g.data()}});
  CHECK(big.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(big.message()), Catch::Matchers::Contains("with --replicas=2 a push takes one request"));
  std::vector<float> rows(4, -99);
  REQUIRE(job.Pull(0, 0, {{0, ids.data(), 2, rows.data()}}).ok());
  CHECK(rows == std::vector<float>(4, 0.0f));  // nothing of the refused push was applied
  REQUIRE(job.Push(0, 0, {{0, ids.data(), 2, g.data()}}).ok());  // a push within the limit still goes
  REQUIRE(job.Pull(0, 1, {{0, ids.data(), 2, rows.data()}}).ok());
  CHECK(rows == std::vector<float>(4, -0.5f));  // lr 1 over 2 workers' pushes in async (1/N each)
}

TEST_CASE("a pull whose ids outweigh its rows splits by the request's size too", "[sparse]") {
  Layout l = SmallLayout();
  l.tables = {Table("flags", 1)};  // 8 bytes of id a row for 4 of answer
  Job job(1 << 20, l);
  std::vector<int64_t> ids(250000);  // ~125,000 a server: 1 MB of ids each, over the limit in one request
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>(k);
  std::vector<float> rows(ids.size(), -99);
  REQUIRE(job.Pull(0, 0, {{0, ids.data(), ids.size(), rows.data()}}).ok());
  CHECK(rows == std::vector<float>(rows.size(), 0.0f));
}

}  // namespace
}  // namespace shardps::testing
