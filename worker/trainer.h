// Drives one worker's training: per step, pulls weights layer by layer in
// forward order, runs forward as each layer's weights arrive, then backward,
// pushing each layer's gradients as soon as they are ready (last layer first).
// Rank `eval_rank` evaluates test accuracy after every epoch.
//
// The job's step fixes the data position: step s is batch s % E of epoch
// s / E (E steps per epoch, the same on every worker), so a worker that
// joins a running job, or rejoins it after a server restart rewound it,
// continues at the job's step with the matching batch.
//
// Not thread-safe: Run() is called once, from one thread.
#ifndef SHARDPS_WORKER_TRAINER_H_
#define SHARDPS_WORKER_TRAINER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/trace.h"
#include "worker/dataset.h"
#include "worker/divergence_watch.h"
#include "worker/model.h"
#include "client/pending_call.h"
#include "client/ps_client.h"

namespace shardps {

struct TrainerOptions {
  int rank = 0;
  int num_workers = 1;
  int batch_size = 64;
  int epochs = 1;
  uint64_t seed = 1;
  int log_every = 100;            // steps between progress lines; 0: none.
  int eval_rank = 0;              // -1: nobody evaluates.
  int64_t max_steps_per_epoch = 0;  // 0: the whole share.
  int wire_value_bytes = 4;       // bytes a value takes on the wire (2 with bfloat16), for the summary.
  std::string job = "this job";   // names the mode and workers in divergence warnings
  bool stop_on_divergence = false;  // a diverging run ends with an error (a non-finite loss always does)
  Trace* trace = nullptr;           // records steps, compute and waits; null: none. Borrowed.
};

struct TimeSplit {
  double pull_wait = 0, compute = 0, push_wait = 0;
};

// Where a running trainer stands, for the worker's metrics endpoint.
struct TrainerProgress {
  int64_t step = 0;            // the job step it is at
  int64_t steps = 0;           // steps it completed
  int64_t samples = 0;
  int64_t rejoins = 0;
  TimeSplit split;             // seconds, since the start
  int64_t bytes_pushed = 0;    // payload bytes on the wire
  int64_t bytes_pulled = 0;
  double samples_per_second = 0;  // since the start of training
};

struct EpochResult {
  int epoch = 0;
  double seconds = 0;
  double mean_loss = 0;
  double train_accuracy = 0;
  double test_accuracy = -1;  // -1: not evaluated on this worker.
};

// FNV-1a 64 of the tensors' float32 bytes, in order.
uint64_t WeightsFingerprint(const std::vector<HostBuffer>& tensors);

struct TrainSummary {
  std::vector<EpochResult> epochs;
  int64_t first_step = 0;  // where this worker joined the job
  int64_t rejoins = 0;     // times it lined up with the job again (server restarts, rewinds)
  int64_t steps_redone = 0;  // steps run twice because a rewind went back over them
  int64_t steps = 0;
  int64_t samples = 0;
  double wall_seconds = 0;
  double samples_per_second = 0;
  double cpu_seconds = 0;       // this process, user + system, over the run
  int64_t bytes_per_step = 0;   // pushed plus pulled payload bytes per step
  TimeSplit split;
  std::string divergence;  // the divergence warning, if one was given
  double final_test_accuracy = -1;
  // FNV-1a of the weights that test accuracy was measured with, every
  // tensor's float32 bytes in layout order: two runs that end bitwise
  // alike print the same (0: this rank does not evaluate).
  uint64_t final_weights_fnv1a = 0;
  std::vector<float> losses;  // every step's loss, in order.
};

class Trainer {
 public:
  // All pointers must outlive the trainer; `test` may be null when this rank
  // does not evaluate.
  Trainer(const TrainerOptions& options, Model* model, PsClient* client, const Dataset* train,
          const Dataset* test);

  // Joins the job, initialises the servers (first writer wins) and trains
  // from the job's step to the end of the last epoch.
  absl::StatusOr<TrainSummary> Run();

  // Thread-safe: may be called while Run() runs.
  TrainerProgress Progress() const;

 private:
  // One epoch's running figures, and the window of the last progress line.
  struct EpochProgress {
    int epoch = -1;
    std::vector<int64_t> shard;  // this worker's sample indices for the epoch
    absl::Time start;
    double loss = 0, window_loss = 0;
    int64_t right = 0, window_right = 0, steps = 0, window_steps = 0;
    absl::Time window_start;
    TimeSplit split_before;
  };
  // Registers (lining up with the job) and sends the initial weights;
  // returns the step to continue at.
  absl::StatusOr<int64_t> Join();
  // After a step failed with a rejoin status at `step`: joins again.
  absl::StatusOr<int64_t> Rejoin(int64_t step, const absl::Status& why, TrainSummary& summary);
  int64_t StepsPerEpoch() const;
  // Host buffers allocated and an epoch holds at least one batch.
  absl::Status CheckReady() const;
  EpochProgress StartEpoch(int epoch);
  // Counts a finished step; logs every log_every steps.
  void Record(float loss, int correct, int64_t i, int64_t per_epoch, EpochProgress& p, TrainSummary& summary);
  // Ends the epoch whose last step was `step`: evaluation and the result.
  absl::Status EndEpoch(int64_t step, EpochProgress& progress, TrainSummary& summary);
  // A worker that joined a job already trained to its last step (`total`; a
  // reused job directory restored the final checkpoint) trains nothing: it
  // says so and, as the evaluating rank, reports the accuracy the job reached.
  absl::Status ReportFinishedJob(int64_t total, TrainSummary& summary);
  void LogProgress(const EpochProgress& progress, int64_t done, int64_t per_epoch);
  // One step. With `pull_ahead`, each layer's pull for the next step leaves
  // as soon as its push for this step is acknowledged, so weights travel
  // during the rest of backward.
  absl::Status Step(int64_t step, const std::vector<int64_t>& indices, bool pull_ahead, float* loss,
                    int* correct);
  // Pulls (or takes the pulls ahead) and runs forward layer by layer.
  absl::Status Forward(int64_t step);
  // Backward, pushing each layer's gradients as soon as they are ready. The
  // step does not wait for its pushes: a layer's push is waited for when
  // the next step's backward needs its host buffer again (DrainTransfers at
  // the end).
  absl::Status BackwardAndPush(int64_t step, bool pull_ahead);
  void Wait(PendingCall& p, double& bucket, absl::Status& failure);
  // Records a span "<what> <index>" (just `what` when index < 0) on `track`
  // of the trace, when there is one.
  void TraceSpan(const char* track, absl::string_view what, int64_t index, absl::Time start, int64_t step) const;
  absl::StatusOr<double> Evaluate(int64_t step);
  void LoadBatch(const Dataset& data, const int64_t* indices, int count);
  std::vector<TensorOut> WeightsOf(int layer);
  // Waits for the pulls issued ahead (they write host_weights_) and the
  // pushes in flight (they read host_grads_); returns the first error.
  absl::Status DrainTransfers();

  const TrainerOptions options_;
  Model* const model_;
  PsClient* const client_;
  const Dataset* const train_;
  const Dataset* const test_;
  // Host staging of weights and gradients, in the backend's host memory
  // (pinned on CUDA): pulls land here and pushes send from here.
  std::vector<HostBuffer> host_weights_, host_grads_;
  std::vector<float> batch_images_;
  std::vector<int32_t> batch_labels_;
  TimeSplit split_;
  std::vector<std::shared_ptr<PendingCall>> pulls_ahead_;  // per layer: in flight for the coming step
  std::vector<std::shared_ptr<PendingCall>> pushes_;       // per layer: the last push, maybe in flight
  DivergenceWatch divergence_;
  mutable absl::Mutex progress_mu_;
  TrainerProgress progress_ ABSL_GUARDED_BY(progress_mu_);
  absl::Time run_start_ ABSL_GUARDED_BY(progress_mu_) = absl::InfinitePast();
};

// The summary as JSON, with `config` (already JSON) embedded.
std::string SummaryJson(const TrainSummary& summary, const std::string& config_json);

}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_H_
