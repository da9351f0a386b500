// ps_worker: one data-parallel worker of a ShardPS job. Flags live here only.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/health_server.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/mutex_tuning.h"
#include "common/trace.h"
#include "common/wire_dtype.h"
#include "kernels/cuda_context.h"
#include "spdlog/spdlog.h"
#include "client/client_flags.h"
#include "worker/cuda_backend.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "client/ps_client.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"

ABSL_FLAG(std::string, model, "mlp", "mlp (784-256-128-10) or cnn (two conv+pool layers, dense 128, dense 10).");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist", "Directory of the IDX (gzip) files.");
ABSL_FLAG(int64_t, synthetic, 0, "Train on this many synthetic samples instead of --data_dir (benchmarks).");
ABSL_FLAG(int, batch_size, 64, "Samples per step on this worker.");
ABSL_FLAG(int, epochs, 1, "Passes over the training set.");
ABSL_FLAG(int64_t, max_steps_per_epoch, 0, "Stop each epoch after this many steps (0: the whole share).");
ABSL_FLAG(std::string, device, "auto", "auto (CUDA when a GPU is present, else the CPU), cpu or cuda.");
ABSL_FLAG(int, gpu, -1, "GPU index for --device=cuda or auto (-1: rank modulo the number of GPUs).");
ABSL_FLAG(bool, tf32, false, "Let cuBLAS use TF32 tensor cores for FP32 GEMMs.");
ABSL_FLAG(int, blas_threads, 1, "OpenBLAS threads of the CPU backend (0: OpenBLAS's choice).");
ABSL_FLAG(uint64_t, seed, 1, "Job seed: initial weights and per-epoch shuffles.");
ABSL_FLAG(int, eval_rank, 0, "Rank that evaluates test accuracy after each epoch (-1: none).");
ABSL_FLAG(int, log_every, 100, "Steps between progress lines (0: none).");
ABSL_FLAG(std::string, summary_json, "", "Write the run's summary here at the end.");
ABSL_FLAG(std::string, trace_file, "",
          "Write a Chrome/Perfetto trace (JSON) of every transfer and step phase here at the end. Empty: none.");
ABSL_FLAG(bool, stop_on_divergence, false,
          "Exit with an error when training diverges (an epoch's mean loss no lower than the first steps' "
          "after 2 epochs); without it a warning is logged and recorded in the summary. A loss that is not "
          "finite always stops the worker.");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics port; -1: off, 0: pick one (logged).");
ABSL_FLAG(int, health_port, -1,
          "A plaintext port serving the gRPC health service (for probes); -1: off, 0: pick one (logged).");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0", "Address the metrics and health endpoints listen on.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off.");

namespace shardps {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> ChooseBackend(const std::string& device, int rank) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("unknown --device '", device, "'; want auto, cpu or cuda"));
  }
  if (device == "cpu") return MakeCpuBackend(absl::GetFlag(FLAGS_blas_threads));
  absl::StatusOr<int> gpus = CudaDeviceCount();
  if (!gpus.ok()) {
    if (device == "cuda") return absl::Status(gpus.status().code(), absl::StrCat("--device=cuda: ", gpus.status().message()));
    spdlog::info("device auto: no usable GPU ({}); using the CPU (OpenBLAS)", std::string(gpus.status().message()));
    return MakeCpuBackend(absl::GetFlag(FLAGS_blas_threads));
  }
  const int gpu = absl::GetFlag(FLAGS_gpu) >= 0 ? absl::GetFlag(FLAGS_gpu) : rank % *gpus;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCudaBackend(gpu, absl::GetFlag(FLAGS_tf32));
  if (backend.ok()) spdlog::info("device {}: using {}", device, (*backend)->name());
  return backend;
}

std::string ConfigJson(const ClientOptions& c, const TrainerOptions& t, const std::string& device) {
  return absl::StrCat("{\"model\": \"", absl::GetFlag(FLAGS_model), "\", \"mode\": \"", ModeName(c.job.mode),
                      "\", \"staleness\": ", c.job.staleness, ", \"num_servers\": ", c.job.num_servers,
                      ", \"num_workers\": ", c.job.num_workers, ", \"rank\": ", c.rank,
                      ", \"batch_size\": ", t.batch_size, ", \"epochs\": ", t.epochs, ", \"seed\": ", t.seed,
                      ", \"device\": \"", device, "\", \"data\": \"",
                      absl::GetFlag(FLAGS_synthetic) > 0 ? "synthetic" : absl::GetFlag(FLAGS_data_dir), "\"}");
}

TrainerOptions TrainerOptionsFromFlags(const ClientOptions& client) {
  TrainerOptions t;
  t.rank = client.rank;
  t.num_workers = client.job.num_workers;
  t.batch_size = absl::GetFlag(FLAGS_batch_size);
  t.epochs = absl::GetFlag(FLAGS_epochs);
  t.seed = absl::GetFlag(FLAGS_seed);
  t.log_every = absl::GetFlag(FLAGS_log_every);
  t.eval_rank = absl::GetFlag(FLAGS_eval_rank);
  t.max_steps_per_epoch = absl::GetFlag(FLAGS_max_steps_per_epoch);
  t.wire_value_bytes = ValueBytes(client.wire_dtype);
  t.job = absl::StrCat(ModeName(client.job.mode), " mode with ", client.job.num_workers,
                       client.job.num_workers == 1 ? " worker" : " workers");
  t.stop_on_divergence = absl::GetFlag(FLAGS_stop_on_divergence);
  return t;
}

// The training and test sets: --synthetic samples, or the IDX files of --data_dir.
absl::Status LoadData(uint64_t seed, absl::StatusOr<Dataset>& train, absl::StatusOr<Dataset>& test) {
  if (absl::GetFlag(FLAGS_synthetic) > 0) {
    train = SyntheticDataset(absl::GetFlag(FLAGS_synthetic), 28, 28, seed);
    test = SyntheticDataset(2000, 28, 28, seed + 1);
  } else {
    train = LoadMnistStyle(absl::GetFlag(FLAGS_data_dir), /*train=*/true);
    if (!train.ok()) return train.status();
    test = LoadMnistStyle(absl::GetFlag(FLAGS_data_dir), /*train=*/false);
  }
  return test.status();
}

// --health_port: up from the start, so probes see a worker that waits for
// its servers as alive. Null when off.
absl::StatusOr<std::unique_ptr<HealthServer>> StartHealth() {
  if (absl::GetFlag(FLAGS_health_port) < 0) return nullptr;
  auto health = HealthServer::Start(absl::GetFlag(FLAGS_metrics_address), absl::GetFlag(FLAGS_health_port));
  if (health.ok()) spdlog::info("health port {}", (*health)->port());
  return health;
}

int Run() {
  const int rank = absl::GetFlag(FLAGS_rank);
  if (absl::Status s = SetUpLogging(absl::GetFlag(FLAGS_log_level), absl::StrCat("worker ", rank)); !s.ok()) {
    fprintf(stderr, "ps_worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    spdlog::critical("{}", std::string(s.message()));
    return 1;
  };
  absl::StatusOr<std::unique_ptr<HealthServer>> health = StartHealth();
  if (!health.ok()) return fail(health.status());
  absl::StatusOr<ClientOptions> client_options = ClientOptionsFromFlags();
  if (!client_options.ok()) return fail(client_options.status());
  std::unique_ptr<Trace> trace;
  if (!absl::GetFlag(FLAGS_trace_file).empty()) trace = std::make_unique<Trace>(absl::StrCat("ps_worker ", rank));
  client_options->trace = trace.get();
  TrainerOptions trainer_options = TrainerOptionsFromFlags(*client_options);
  trainer_options.trace = trace.get();
  absl::StatusOr<Dataset> train, test;
  if (absl::Status loaded = LoadData(trainer_options.seed, train, test); !loaded.ok()) return fail(loaded);
  absl::StatusOr<std::unique_ptr<Backend>> backend = ChooseBackend(absl::GetFlag(FLAGS_device), rank);
  if (!backend.ok()) return fail(backend.status());
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(
      absl::GetFlag(FLAGS_model), backend->get(), trainer_options.batch_size, {1, train->rows, train->cols});
  if (!model.ok()) return fail(model.status());
  client_options->layout = (*model)->layout();
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Connect(*client_options);
  if (!client.ok()) return fail(client.status());

  spdlog::info("{} on {} ({} parameters), {} mode, {} servers, {} workers, batch {}", absl::GetFlag(FLAGS_model),
               (*backend)->name(), (*model)->layout().TotalBytes() / 4, ModeName(client_options->job.mode),
               client_options->job.num_servers, client_options->job.num_workers, trainer_options.batch_size);
  Trainer trainer(trainer_options, model->get(), client->get(), &*train, &*test);
  std::unique_ptr<WorkerMetrics> metrics;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    auto started = WorkerMetrics::Start(
        absl::StrCat(absl::GetFlag(FLAGS_metrics_address), ":", absl::GetFlag(FLAGS_metrics_port)), rank, &trainer,
        client->get());
    if (!started.ok()) return fail(started.status());
    metrics = *std::move(started);
    spdlog::info("metrics on port {}", metrics->port());
  }
  absl::StatusOr<TrainSummary> summary = trainer.Run();
  if (!summary.ok()) return fail(summary.status());
  spdlog::info("done: {} steps in {:.1f} s, {:.0f} samples/s{}", summary->steps, summary->wall_seconds,
               summary->samples_per_second,
               summary->final_test_accuracy >= 0 ? absl::StrCat(", final test accuracy ", summary->final_test_accuracy) : "");
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << SummaryJson(*summary, ConfigJson(*client_options, trainer_options, (*backend)->name()));
    if (!out) return fail(absl::InternalError(absl::StrCat("cannot write ", path)));
  }
  if (trace) {
    (*client)->Shutdown();  // every transfer recorded
    if (absl::Status s = trace->Write(absl::GetFlag(FLAGS_trace_file)); !s.ok()) return fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::KeepFreedMemoryForReuse();
  shardps::SkipMutexDeadlockDetection();
  shardps::ParseJobCommandLine(argc, argv,
                               "ps_worker: a ShardPS training worker.\n"
                               "  ps_worker --flagfile=job.flags --servers=h0:7000,h1:7001 --rank=0",
                               shardps::ForeignFlags::kJobFlagsOnly);
  return shardps::Run();
}
