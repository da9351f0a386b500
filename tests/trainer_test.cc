// The trainer over real gRPC with an in-process server.
#include <catch2/catch.hpp>

#include "common/metrics_http.h"
#include "common/trace.h"
#include "tests/test_cluster.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

namespace shardps::testing {
namespace {

// One sync server and one connected mlp worker (batch 32) on the CPU.
struct OneWorkerMlp {
  explicit OneWorkerMlp(double momentum, Trace* trace = nullptr) : cluster(Options(momentum)) {
    REQUIRE(model.ok());
    ClientOptions c = cluster.ClientFor(0, (*model)->layout());
    c.trace = trace;
    client = PsClient::Connect(c);
    REQUIRE(client.ok());
  }
  static ServerOptions Options(double momentum) {
    ServerOptions o = SyncOptions(1, 1);
    o.job.partition_bytes = 64 << 10;
    o.optimizer.lr = 0.05;
    o.optimizer.momentum = momentum;
    return o;
  }

  TestCluster cluster;
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create("mlp", backend.get(), 32);
  absl::StatusOr<std::unique_ptr<PsClient>> client;
};

// 2 epochs of 25 steps of 32 samples, seed 9, no progress lines.
TrainerOptions TwoShortEpochs() {
  TrainerOptions t;
  t.batch_size = 32;
  t.epochs = 2;
  t.max_steps_per_epoch = 25;
  t.seed = 9;
  t.log_every = 0;
  return t;
}

TrainSummary TrainOnce(const Dataset& train, const Dataset& test) {
  OneWorkerMlp job(/*momentum=*/0.9);
  const TrainerOptions t = TwoShortEpochs();
  Trainer trainer(t, job.model->get(), job.client->get(), &train, &test);
  absl::StatusOr<TrainSummary> summary = trainer.Run();
  REQUIRE(summary.ok());
  return *summary;
}

TEST_CASE("one worker, fixed seed, sync: the same loss sequence twice", "[trainer]") {
  const Dataset train = SyntheticDataset(4000, 28, 28, 1);
  const Dataset test = SyntheticDataset(500, 28, 28, 2);
  const TrainSummary a = TrainOnce(train, test);
  const TrainSummary b = TrainOnce(train, test);
  REQUIRE(a.losses.size() == 50);
  REQUIRE(a.losses == b.losses);  // bit for bit
  REQUIRE(a.final_test_accuracy == b.final_test_accuracy);
  REQUIRE(a.epochs[1].mean_loss < a.epochs[0].mean_loss);
  REQUIRE(a.final_test_accuracy > 0.5);  // the synthetic task is learnable; chance is 0.1
}

// A worker that joins a job already trained to its last step (ps_slurm run
// again into the same --job_dir restores its final checkpoint) trains
// nothing and reports the accuracy the job reached, not -1.
TEST_CASE("a worker joining a finished job reports its final accuracy", "[trainer]") {
  const Dataset train = SyntheticDataset(4000, 28, 28, 1);
  const Dataset test = SyntheticDataset(500, 28, 28, 2);
  OneWorkerMlp job(/*momentum=*/0.9);
  const TrainerOptions t = TwoShortEpochs();
  Trainer first(t, job.model->get(), job.client->get(), &train, &test);
  absl::StatusOr<TrainSummary> trained = first.Run();
  REQUIRE(trained.ok());
  REQUIRE(trained->final_test_accuracy > 0.5);
  absl::StatusOr<std::unique_ptr<PsClient>> again = PsClient::Connect(job.cluster.ClientFor(0, (*job.model)->layout()));
  REQUIRE(again.ok());
  Trainer second(t, job.model->get(), again->get(), &train, &test);
  absl::StatusOr<TrainSummary> finished = second.Run();
  REQUIRE(finished.ok());
  CHECK(finished->first_step == 50);
  CHECK(finished->steps == 0);
  CHECK(finished->final_test_accuracy == trained->final_test_accuracy);
}

TEST_CASE("a worker's metrics: steps, samples, the time split, bytes and retries", "[trainer][metrics]") {
  const Dataset train = SyntheticDataset(4000, 28, 28, 1);
  const Dataset test = SyntheticDataset(500, 28, 28, 2);
  OneWorkerMlp job(/*momentum=*/0);
  TrainerOptions t;
  t.batch_size = 32;
  t.max_steps_per_epoch = 25;
  t.log_every = 0;
  Trainer trainer(t, job.model->get(), job.client->get(), &train, &test);
  auto metrics = WorkerMetrics::Start("127.0.0.1:0", 3, &trainer, job.client->get());
  REQUIRE(metrics.ok());
  REQUIRE(trainer.Run().ok());
  const std::string page = ScrapeLoopbackMetrics((*metrics)->port());
  INFO(page);
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_steps_total{rank=\"3\"} 25"));
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_samples_total{rank=\"3\"} 800"));
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_seconds_total{rank=\"3\",phase=\"compute\"}"));
  // mlp has 235146 parameters: 25 steps push and pull 4 bytes of each.
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_pushed_bytes_total{rank=\"3\"} 23514600"));
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_retries_total{rank=\"3\"} 0"));
  REQUIRE_THAT(page, Catch::Contains("shardps_worker_registrations_total{rank=\"3\"} 1"));
}


int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("a worker's trace: a span per step and per layer's forward and backward, transfers beside them",
          "[trainer][trace]") {
  const Dataset train = SyntheticDataset(4000, 28, 28, 1);
  const Dataset test = SyntheticDataset(500, 28, 28, 2);
  Trace trace("ps_worker 0");
  OneWorkerMlp job(/*momentum=*/0, &trace);
  TrainerOptions t;
  t.batch_size = 32;
  t.max_steps_per_epoch = 4;
  t.log_every = 0;
  t.trace = &trace;
  Trainer trainer(t, job.model->get(), job.client->get(), &train, &test);
  REQUIRE(trainer.Run().ok());
  (*job.client)->Shutdown();  // every transfer recorded
  const std::string json = trace.Json();
  INFO(json.substr(0, 4000));
  for (int step = 0; step < 4; ++step) {
    REQUIRE(Occurrences(json, "\"name\": \"step " + std::to_string(step) + "\"") == 1);
  }
  REQUIRE(Occurrences(json, "\"name\": \"step 4\"") == 0);
  const int layers = (*job.model)->num_layers();
  REQUIRE(Occurrences(json, "\"name\": \"forward 0\"") == 4);
  REQUIRE(Occurrences(json, "\"name\": \"backward " + std::to_string(layers - 1) + "\"") == 4);
  // mlp: 3 layers of 2 tensors, one 64 KB partition or more each: a pull of
  // each a step; pushes to the one server coalesce, one request a step at least.
  REQUIRE(Occurrences(json, "\"cat\": \"push\"") >= 4);
  REQUIRE(Occurrences(json, "\"cat\": \"pull\"") >= 4 * 6);
  REQUIRE(trace.dropped() == 0);
}

}  // namespace
}  // namespace shardps::testing
