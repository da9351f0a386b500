// Training data: the IDX format of MNIST and Fashion-MNIST (gzip or plain),
// a synthetic source for benchmarks, and each worker's share of an epoch.
#ifndef SHARDPS_WORKER_DATASET_H_
#define SHARDPS_WORKER_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardps {

inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  int64_t count = 0;
  int rows = 0, cols = 0;      // image size
  int classes = 10;
  std::vector<float> images;   // count * rows * cols, scaled to [0, 1]
  std::vector<int32_t> labels;  // count, in [0, classes)

  int64_t ImageSize() const { return static_cast<int64_t>(rows) * cols; }
};

// Reads an IDX image file (magic 2051) and its label file (magic 2049).
// NOT_FOUND naming the file (and how to install the dataset) when missing;
// DATA_LOSS naming the file when truncated, corrupt or mismatched.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path);

// "train" or "t10k" files of `dir`, e.g. train-images-idx3-ubyte.gz.
absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train);

// Random images of `count` samples whose label is a simple function of the
// pixels, so a model can learn it. Deterministic in `seed`.
Dataset SyntheticDataset(int64_t count, int rows, int cols, uint64_t seed);

// The sample indices worker `rank` of `num_workers` trains on in `epoch`:
// all indices shuffled with (seed, epoch), then the rank's contiguous share.
// Every worker gets count / num_workers samples, so steps line up.
std::vector<int64_t> EpochShard(int64_t count, uint64_t seed, int epoch, int rank, int num_workers);

}  // namespace shardps

#endif  // SHARDPS_WORKER_DATASET_H_
