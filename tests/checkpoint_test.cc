// Checkpoints: the safetensors format, and a real ps_server process killed
// with SIGKILL after a checkpoint, restarted with the same flags, serving the
// checkpointed weights bit for bit.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/checkpoint_store.h"
#include "server/key_table.h"
#include "server/safetensors.h"
#include "server/shard_checkpoint.h"
#include "server/step_capture.h"
#include "tests/server_process.h"
#include "tests/checkpoints_on_demand.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

TEST_CASE("safetensors round trip, and corrupt files are refused", "[checkpoint]") {
  const std::string path = TempDir("st") + "/a.safetensors";
  std::vector<float> a = {1.5f, -2.0f, 3.25f};
  std::vector<float> b(10, 7.0f);
  REQUIRE(WriteSafetensorsAtomically(path, {{"step", "3"}}, {{"a", {3}, a}, {"b/0", {2, 5}, b}}).ok());
  auto file = ReadSafetensors(path);
  REQUIRE(file.ok());
  REQUIRE(file->metadata.at("step") == "3");
  REQUIRE(file->tensors.at("a").values == a);
  REQUIRE(file->tensors.at("b/0").shape == std::vector<int64_t>{2, 5});
  REQUIRE(!std::filesystem::exists(path + ".tmp"));

  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  REQUIRE(ReadSafetensors(path).status().code() == absl::StatusCode::kDataLoss);
  REQUIRE(ReadSafetensors(path + ".missing").status().code() == absl::StatusCode::kNotFound);
}

// A safetensors file of `header` (its JSON) and 12 bytes of data.
std::string FileWithHeader(const std::string& header) {
  const std::string path = TempDir("st-header") + "/h.safetensors";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);  // little-endian, as on every machine this runs on
  bytes += header + std::string(12, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST_CASE("a header with a bad escape, a bad number or a shape past the file: DATA_LOSS, not an exception",
          "[checkpoint]") {
  const std::string good = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  REQUIRE(ReadSafetensors(FileWithHeader(good)).ok());  // the control
  for (const std::string& bad : {std::string(R"({"\uZZZZ":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})"),
                                 std::string(R"({"a":{"dtype":"F32","shape":[-],"data_offsets":[0,12]}})"),
                                 std::string(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,1-2]}})"),
                                 // a shape whose product wraps to 0 (2^31 x 2^31 x 4 bytes), and one past the file
                                 std::string(R"({"a":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})"),
                                 std::string(R"({"a":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,12]}})"),
                                 std::string(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})")}) {
    INFO(bad);
    absl::StatusOr<SafetensorsFile> read = ReadSafetensors(FileWithHeader(bad));
    CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("a checkpoint whose optimizer slot has another length is refused: DATA_LOSS, nothing restored",
          "[checkpoint]") {
  KeyTable table(*KeyMap::Build(SmallLayout(), 1, 16), 0, /*num_slots=*/1, /*num_workers=*/1);
  std::vector<KeySnapshot> saved = table.Capture();
  REQUIRE(table.Restore(saved, "the control").ok());
  saved[1].version = 5;
  saved[1].slots[0].resize(1);  // the optimizer would write past it
  const absl::Status restored = table.Restore(saved, "this file");
  CHECK(restored.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(restored.message()), Catch::Contains("this file does not match key"));
  CHECK(table.VersionRange().second == 0);
}

TEST_CASE("ps_server restarted after SIGKILL serves the checkpointed step bit for bit", "[checkpoint][process]") {
  const std::string dir = TempDir("ckpt");
  const std::string binary = RunfilePath("server/ps_server");
  const std::vector<std::string> flags = {
      "--port=0", "--server_id=0", "--num_servers=1", "--num_workers=1", "--mode=sync",
      "--partition_bytes=16", "--optimizer=adam", "--lr=0.01", "--checkpoint_dir=" + dir,
      "--checkpoint_every=4", "--log_level=warn"};
  const Layout layout = SmallLayout();
  ClientOptions options;
  options.job = SyncOptions(1, 1).job;
  options.layout = layout;
  options.server_timeout = absl::Seconds(5);

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto random_tensors = [&] {
    auto w = Zeros(layout);
    for (auto& t : w) {
      for (float& x : t) x = dist(rng);
    }
    return w;
  };

  auto before = Zeros(layout);
  {
    ServerProcess server(binary, flags);
    options.servers = {absl::StrCat("127.0.0.1:", server.port())};
    auto client = PsClient::Connect(options);
    REQUIRE(client.ok());
    REQUIRE((*client)->Register().ok());
    REQUIRE((*client)->Init(random_tensors()).ok());
    for (int t = 0; t < 4; ++t) {
      auto g = random_tensors();
      REQUIRE((*client)->Push(t, {{0, g[0].data()}, {1, g[1].data()}}).ok());
    }
    REQUIRE((*client)->Pull(4, {{0, before[0].data()}, {1, before[1].data()}}).ok());
    // Wait for the step-4 checkpoint (written by the server's housekeeping).
    const std::string path = ShardCheckpointPath(dir, 0, 1, 4);
    absl::Time deadline = absl::Now() + absl::Seconds(20);
    bool written = false;
    while (!written && absl::Now() < deadline) {
      auto shard = ReadShardCheckpoint(path);
      written = shard.ok() && shard->step == 4;
      if (!written) absl::SleepFor(absl::Milliseconds(20));
    }
    REQUIRE(written);
    const int status = server.Signal(SIGKILL);
    REQUIRE(WIFSIGNALED(status));
  }

  // Restarted, the sync server restores step 4 and waits for a rewind; the
  // worker's registration sees that and rewinds the job to step 4, the
  // newest step every server (here the only one) holds.
  ServerProcess restarted(binary, flags);
  options.servers = {absl::StrCat("127.0.0.1:", restarted.port())};
  auto client = PsClient::Connect(options);
  REQUIRE(client.ok());
  auto step = (*client)->Register();
  REQUIRE(step.ok());
  REQUIRE(*step == 4);
  REQUIRE((*client)->Stats().rewinds == 1);
  auto after = Zeros(layout);
  REQUIRE((*client)->Pull(4, {{0, after[0].data()}, {1, after[1].data()}}).ok());
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    REQUIRE(std::memcmp(before[t].data(), after[t].data(), before[t].size() * 4) == 0);
  }
  // Training goes on from there (Adam's slots were restored too).
  auto g = Zeros(layout);
  REQUIRE((*client)->Push(4, {{0, g[0].data()}, {1, g[1].data()}}).ok());

  // SIGTERM: a clean exit 0 with a final checkpoint of step 5.
  const int status = restarted.Signal(SIGTERM);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto final_shard = ReadShardCheckpoint(ShardCheckpointPath(dir, 0, 1, 5));
  REQUIRE(final_shard.ok());
  REQUIRE(final_shard->step == 5);
  REQUIRE(ListCheckpointSteps(dir, 0, 1) == std::vector<int64_t>{4, 5});  // the newest two are kept
}

TEST_CASE("a checkpoint file's name is read back only as ShardCheckpointPath writes it", "[checkpoint]") {
  const std::string path = ShardCheckpointPath("/ckpt", 3, 12, 4096);
  const std::optional<ShardCheckpointName> n = ParseShardCheckpointName(path.substr(path.rfind('/') + 1));
  REQUIRE(n.has_value());
  CHECK(n->server_id == 3);
  CHECK(n->num_servers == 12);
  CHECK(n->step == 4096);
  for (const char* other : {"shard-3-of-12-step-4096.safetensors.tmp", "shard-3-of-12-step-4096",
                            "ckpt-3-of-12-step-4.safetensors",
                            "shard-3-of-12-step--1.safetensors", "shard-03-of-12-step-4.safetensors",
                            "shard-3-of-12-step-+4.safetensors", "shard-3-of-0-step-4.safetensors",
                            "shard-3-step-4-of-12.safetensors", "shard-x-of-12-step-4.safetensors",
                            "shard-3-of-12-step-4.5.safetensors", "shard--of--step-.safetensors"}) {
    INFO(other);
    CHECK_FALSE(ParseShardCheckpointName(other).has_value());
  }
  // The three readers of the names agree: a directory of one good file and look-alikes.
  const std::string dir = TempDir("names");
  for (const char* name : {"shard-0-of-2-step-7.safetensors", "shard-0-of-2-step-07.safetensors",
                           "shard-1-of-3-step-x.safetensors", "shard-0-of-2-step-8.safetensors.tmp"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  CHECK(ListCheckpointSteps(dir, 0, 2) == std::vector<int64_t>{7});
  CHECK(CheckpointOfOtherServerCount(dir, 2).empty());
  CHECK(CheckpointOfOtherServerCount(dir, 3) == "shard-0-of-2-step-7.safetensors");
}

TEST_CASE("a checkpoint from another configuration is refused at start", "[checkpoint]") {
  const std::string dir = TempDir("foreign");
  ShardSnapshot shard;
  shard.mode = Mode::kAsync;
  shard.layout = SmallLayout();
  shard.partition_bytes = 16;
  shard.optimizer = "sgd";
  REQUIRE(WriteShardCheckpoint(ShardCheckpointPath(dir, 0, 1, 0), shard).ok());
  ServerOptions o = SyncOptions(1, 1);
  o.checkpoint_dir = dir;
  RealClock clock;
  auto core = ParameterServer::Create(o, &clock);
  REQUIRE(core.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE_THAT(std::string(core.status().message()), Catch::Contains("mode async"));
}

ShardSnapshot ShardOfStep(int64_t step) {
  ShardSnapshot shard;
  shard.layout = SmallLayout();
  shard.partition_bytes = 16;
  shard.optimizer = "sgd";
  shard.step = step;
  return shard;
}

// One sync worker trains 4 steps; the servers checkpoint steps 2 and 4.
void TrainToCheckpoints2And4(CheckpointsOnDemand& servers) {
  auto worker = servers.cluster.Worker(0);
  REQUIRE(worker->Init(Zeros(SmallLayout())).ok());
  for (int step = 0; step < 4; ++step) {
    REQUIRE(PushAll(*worker, step, Filled(1)).ok());
    if (step == 1) REQUIRE(servers.Reach(1, 2));
  }
  REQUIRE(servers.Reach(1, 4));
}

// A checkpoint damaged on disk (writes are atomic: not by a crash) does not
// stop a restart while an older one is there: it is set aside and that one
// restored (here step 2; the job then rewinds to it).
TEST_CASE("a damaged newest checkpoint is set aside at start, and the one before it restored", "[checkpoint]") {
  const std::string dir = TempDir("damaged-newest");
  CheckpointsOnDemand servers(CrashingServers(Mode::kSync, 1, 1, dir));
  TrainToCheckpoints2And4(servers);
  const std::string newest = ShardCheckpointPath(dir, 0, 1, 4);
  std::filesystem::resize_file(newest, 100);  // cut short
  servers.cluster.Restart(0);
  const ServerStats st = servers.cluster.core(0)->Stats();
  CHECK(st.checkpoint_steps == std::vector<int64_t>{2});
  CHECK(st.max_version == 2);
  CHECK(std::filesystem::exists(newest + ".damaged"));
}

// A newest checkpoint that is no file the server can read as one: a FIFO
// (an open would block) or a dangling link is set aside and the one before
// restored; one that cannot be read for another reason (a link to itself)
// stops the start, naming the file and the reason. Before, each gave
// NOT_FOUND, and the server started afresh and then pruned the good files.
TEST_CASE("a newest checkpoint that cannot be read as a file: set aside, or the start refused, never afresh",
          "[checkpoint]") {
  const std::string dir = TempDir("unreadable-newest");
  {
    CheckpointsOnDemand servers(CrashingServers(Mode::kSync, 1, 1, dir));
    TrainToCheckpoints2And4(servers);
  }
  const std::string newest = ShardCheckpointPath(dir, 0, 1, 4);
  const std::string kept = newest + ".kept";
  std::filesystem::rename(newest, kept);
  ManualClock clock;
  const ServerOptions o = CrashingServers(Mode::kSync, 1, 1, dir);
  const auto restored_step = [&]() -> int64_t {
    absl::StatusOr<std::unique_ptr<ParameterServer>> core = ParameterServer::Create(o, &clock);
    REQUIRE(core.ok());
    return (*core)->Stats().max_version;
  };
  REQUIRE(::mkfifo(newest.c_str(), 0600) == 0);
  CHECK(restored_step() == 2);  // and no hang
  CHECK(std::filesystem::is_fifo(std::filesystem::symlink_status(newest + ".damaged")));
  std::filesystem::remove(newest + ".damaged");
  std::filesystem::create_symlink(dir + "/gone", newest);
  CHECK(restored_step() == 2);
  CHECK(std::filesystem::is_symlink(std::filesystem::symlink_status(newest + ".damaged")));
  std::filesystem::remove(newest + ".damaged");
  std::filesystem::create_symlink(newest, newest);  // a link to itself: ELOOP
  absl::StatusOr<std::unique_ptr<ParameterServer>> refused = ParameterServer::Create(o, &clock);
  REQUIRE(!refused.ok());
  CHECK(refused.status().code() != absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains(newest));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("symbolic links"));
  CHECK(std::filesystem::exists(ShardCheckpointPath(dir, 0, 1, 2)));  // nothing pruned
}

// A job restarted with another --num_servers finds none of its own
// checkpoints but another count's: refused, not started afresh (which
// would drop the trained model); resharded files of its own count are used.
TEST_CASE("checkpoints of another server count only: refused at start, naming the file and the tool",
          "[checkpoint]") {
  const std::string dir = TempDir("other-count");
  std::ofstream(ShardCheckpointPath(dir, 0, 3, 8)) << "x";
  ManualClock clock;
  ServerOptions o = SyncOptions(2, 1);
  o.checkpoint_dir = dir;
  absl::StatusOr<std::unique_ptr<ParameterServer>> refused = ParameterServer::Create(o, &clock);
  REQUIRE(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("shard-0-of-3-step-8.safetensors"));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("shardps_ckpt reshard"));
  o.checkpoint_dir = TempDir("own-count");  // a directory of none: starts afresh
  CHECK(ParameterServer::Create(o, &clock).ok());
}

TEST_CASE("a sync or ssp server keeps at least 2 checkpoints; async may keep 1", "[checkpoint]") {
  ManualClock clock;
  ServerOptions o = SyncOptions(1, 1);
  o.checkpoint_dir = TempDir("keep-one");
  o.checkpoints_to_keep = 1;
  for (Mode mode : {Mode::kSync, Mode::kSsp}) {
    o.job.mode = mode;
    absl::StatusOr<std::unique_ptr<ParameterServer>> refused = ParameterServer::Create(o, &clock);
    REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(refused.status().message()), Catch::Contains("checkpoints_to_keep is 1"));
  }
  o.job.mode = Mode::kAsync;
  CHECK(ParameterServer::Create(o, &clock).ok());
}

TEST_CASE("the checkpoint store keeps the newest two steps and drops an abandoned timeline", "[checkpoint]") {
  const std::string dir = TempDir("store") + "/not/yet/there";  // created on open
  auto store = CheckpointStore::Open(dir, 0, 1, /*keep=*/2);
  REQUIRE(store.ok());
  for (int64_t step : {0, 100, 200, 300}) REQUIRE((*store)->Write(ShardOfStep(step)).ok());
  REQUIRE((*store)->Steps() == std::vector<int64_t>{200, 300});
  REQUIRE((*store)->Read(300)->step == 300);
  const absl::Status missing = (*store)->Read(100).status();
  REQUIRE(missing.code() == absl::StatusCode::kNotFound);
  REQUIRE_THAT(std::string(missing.message()), Catch::Contains("no checkpoint of step 100") &&
                                                   Catch::Contains("[200, 300]"));
  (*store)->DiscardAfter(200);
  REQUIRE((*store)->Steps() == std::vector<int64_t>{200});
}

TEST_CASE("an unwritable checkpoint directory is refused at start, naming the path and the reason", "[checkpoint]") {
  for (const std::string dir : {"/proc/nope", "/proc/self/status/x"}) {
    ServerOptions o = SyncOptions(1, 1);
    o.checkpoint_dir = dir;
    RealClock clock;
    auto core = ParameterServer::Create(o, &clock);
    INFO(core.status().ToString());
    REQUIRE(core.status().code() == absl::StatusCode::kFailedPrecondition);
    REQUIRE_THAT(std::string(core.status().message()), Catch::Contains(dir));
  }
  const std::string read_only = TempDir("read-only");
  REQUIRE(chmod(read_only.c_str(), 0500) == 0);
  auto store = CheckpointStore::Open(read_only, 0, 1, 2);
  if (geteuid() != 0) {  // root writes anyway
    REQUIRE_THAT(std::string(store.status().message()), Catch::Contains("Permission denied"));
  }
}

TEST_CASE("sync checkpoints hold one step exactly, though keys reach it at different moments", "[checkpoint]") {
  KeyTable table(*KeyMap::Build(SmallLayout(), 1, 16), 0, /*num_slots=*/0, /*num_workers=*/1);
  StepCapture capture;
  auto apply = [&](size_t index, float value) {  // one optimizer step of a key
    KeyState& k = table.key(index);
    absl::MutexLock lock(&k.mu);
    std::fill(k.weights->begin(), k.weights->end(), value);
    k.version.fetch_add(1);
    capture.OnVersion(index, k);
  };
  apply(0, 1.0f);  // key 0 reaches step 1 before the capture of step 2 is armed
  REQUIRE(capture.Arm(table, 2));
  for (size_t i = 0; i < table.size(); ++i) apply(i, 10.0f + i);  // keys 1.. reach step 1, key 0 step 2
  REQUIRE(!capture.TakeComplete());
  apply(0, 99.0f);  // key 0 goes on to step 3: its step-2 copy must stay
  for (size_t i = 1; i < table.size(); ++i) apply(i, 20.0f + i);  // the rest reach step 2
  auto complete = capture.TakeComplete();
  REQUIRE(complete);
  REQUIRE(complete->first == 2);
  REQUIRE(complete->second[0].weights[0] == 10.0f);  // key 0 as it was at step 2
  for (size_t i = 1; i < table.size(); ++i) {
    REQUIRE(complete->second[i].version == 2);
    REQUIRE(complete->second[i].weights[0] == 20.0f + i);
  }
  REQUIRE(!capture.Arm(table, 2));  // keys already past the step: nothing to capture
}

}  // namespace
}  // namespace shardps::testing
